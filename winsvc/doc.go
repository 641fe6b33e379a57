// Package winsvc runs scadad as a Windows service: it registers the
// service with the service control manager (recovery actions that restart
// it after 5 s, 30 s and 60 s, as the replaced system's `sc.exe failure`
// line did) and reads them back, sets them on a service registered
// otherwise (the MSI's), registers its Event Log source, starts and stops
// it and waits for the state asked for, and serves the control manager's requests to a
// running daemon (Stop and Shutdown cancel its context). Warnings, errors
// and the service's start, stop and fatal lines go to the Event Log.
//
// The decisions (what is registered, what a state or an exit code means,
// which lines go to the Event Log and how they read) are plain Go behind
// small interfaces (Manager, Sink) and tested on every platform; only
// scm_windows.go and run_windows.go talk to Windows
// (golang.org/x/sys/windows/svc, svc/mgr, svc/eventlog).
//
// It must not run or configure the daemon itself: cmd/scadad passes the
// daemon in as a function and owns the log file.
package winsvc
