package winsvc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestNewSpecRegistersTheSeedsRecoveryAndAbsolutePaths(t *testing.T) {
	spec, err := NewSpec(`C:\Program Files\scadad\scadad.exe`, `C:\ProgramData\scadad\node.yaml`)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{5 * time.Second, 30 * time.Second, 60 * time.Second}
	if len(spec.Recovery) != 3 || spec.Recovery[0] != want[0] || spec.Recovery[1] != want[1] || spec.Recovery[2] != want[2] {
		t.Errorf("recovery %v, want restart after %v", spec.Recovery, want)
	}
	if spec.Name != "scadad" || strings.Join(spec.Args, " ") != `--service --config C:\ProgramData\scadad\node.yaml` {
		t.Errorf("spec %+v", spec)
	}
	for _, tc := range []struct{ exe, cfg, says string }{
		{`scadad.exe`, `C:\x\node.yaml`, "not an absolute path"},
		{`C:\x\scadad.exe`, ``, "needs --config"},
		{`C:\x\scadad.exe`, `node.yaml`, "must be absolute"},
		{`C:\x\scadad.exe`, `C:node.yaml`, "must be absolute"},
		{`C:\x\scadad.exe`, `/etc/scadad/node.yaml`, "must be absolute"},
	} {
		_, err := NewSpec(tc.exe, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("NewSpec(%q, %q) = %v, want an error saying %q", tc.exe, tc.cfg, err, tc.says)
		}
	}
	if _, err := NewSpec(`\\fileserver\scadad\scadad.exe`, `d:/scadad/node.yaml`); err != nil {
		t.Errorf("UNC binary and forward slashes: %v", err)
	}
}

// fakeSCM is a control manager: a started service runs after startDelay
// queries, a stopped one stops after stopDelay queries (or exits with
// exitCode during its start when failStart is set).
type fakeSCM struct {
	mu         sync.Mutex
	specs      map[string]Spec
	status     map[string]Status
	pending    int
	failStart  uint32
	calls      []string
	startDelay int
	stopDelay  int
}

func newFakeSCM() *fakeSCM {
	return &fakeSCM{specs: map[string]Spec{}, status: map[string]Status{}, startDelay: 2, stopDelay: 3}
}

func (f *fakeSCM) Create(spec Spec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "create")
	if _, ok := f.specs[spec.Name]; ok {
		return ErrExists
	}
	f.specs[spec.Name] = spec
	f.status[spec.Name] = Status{State: Stopped}
	return nil
}

func (f *fakeSCM) Delete(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "delete")
	if _, ok := f.specs[name]; !ok {
		return ErrNotInstalled
	}
	if f.status[name].State != Stopped {
		return errors.New("marked for deletion while running")
	}
	delete(f.specs, name)
	return nil
}

func (f *fakeSCM) Start(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "start")
	if _, ok := f.specs[name]; !ok {
		return ErrNotInstalled
	}
	f.status[name] = Status{State: StartPending}
	f.pending = f.startDelay
	return nil
}

func (f *fakeSCM) Stop(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "stop")
	f.status[name] = Status{State: StopPending}
	f.pending = f.stopDelay
	return nil
}

// SetRecovery and Recovery keep and report what Create or SetRecovery
// was given, as Windows' control manager does.
func (f *fakeSCM) SetRecovery(name string, r Recovery) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "set-recovery")
	spec, ok := f.specs[name]
	if !ok {
		return ErrNotInstalled
	}
	spec.Recovery, spec.ResetAfter = r.Restarts, r.ResetAfter
	f.specs[name] = spec
	return nil
}

func (f *fakeSCM) Recovery(name string) (Recovery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	spec, ok := f.specs[name]
	if !ok {
		return Recovery{}, ErrNotInstalled
	}
	return spec.wantedRecovery(), nil
}

func (f *fakeSCM) Query(name string) (Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.specs[name]; !ok {
		return Status{}, ErrNotInstalled
	}
	st := f.status[name]
	if st.State == StartPending || st.State == StopPending {
		if f.pending > 0 {
			f.pending--
			return st, nil
		}
		switch {
		case st.State == StopPending:
			st = Status{State: Stopped}
		case f.failStart != 0:
			st = Status{State: Stopped, ExitCode: f.failStart}
		default:
			st = Status{State: Running}
		}
		f.status[name] = st
	}
	return st, nil
}

func TestCommandsWaitForTheStateAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	scm := newFakeSCM()
	c := Commands{Manager: scm, Poll: time.Millisecond}
	spec, _ := NewSpec(`C:\scadad\scadad.exe`, `C:\scadad\node.yaml`)
	if err := c.Install(spec); err != nil {
		t.Fatal(err)
	}
	if err := c.Install(spec); err == nil || !strings.Contains(err.Error(), "uninstall` first") {
		t.Errorf("second install: %v, want it refused naming uninstall", err)
	}
	if err := c.Start(ctx, "scadad"); err != nil {
		t.Fatal(err)
	}
	if st, _ := scm.Query("scadad"); st.State != Running {
		t.Fatalf("after start: %v", st.State)
	}
	if err := c.Stop(ctx, "scadad"); err != nil {
		t.Fatal(err)
	}
	if st, _ := scm.Query("scadad"); st.State != Stopped {
		t.Fatalf("after stop: %v", st.State)
	}
	if err := c.Stop(ctx, "scadad"); err != nil {
		t.Errorf("stop of a stopped service: %v", err)
	}
	if err := c.Start(ctx, "scadad"); err != nil {
		t.Fatal(err)
	}
	// Uninstall of a running service stops it first (Delete of a running
	// one only marks it).
	if err := c.Uninstall(ctx, "scadad"); err != nil {
		t.Fatal(err)
	}
	if _, err := scm.Query("scadad"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("after uninstall: %v", err)
	}
	if err := c.Start(ctx, "scadad"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("start after uninstall: %v, want ErrNotInstalled", err)
	}
}

func TestStartReportsAServiceThatStoppedDuringItsStart(t *testing.T) {
	scm := newFakeSCM()
	scm.failStart = 1
	c := Commands{Manager: scm, Poll: time.Millisecond}
	spec, _ := NewSpec(`C:\scadad\scadad.exe`, `C:\scadad\node.yaml`)
	if err := c.Install(spec); err != nil {
		t.Fatal(err)
	}
	err := c.Start(context.Background(), "scadad")
	if err == nil || !strings.Contains(err.Error(), "exit code 1") || !strings.Contains(err.Error(), "Event Log") {
		t.Errorf("start of a failing service: %v, want its exit code and where to look", err)
	}
}

func TestStopGivesUpAtTheDeadlineNamingTheState(t *testing.T) {
	scm := newFakeSCM()
	scm.stopDelay = 1 << 30
	c := Commands{Manager: scm, Poll: time.Millisecond}
	spec, _ := NewSpec(`C:\scadad\scadad.exe`, `C:\scadad\node.yaml`)
	_ = c.Install(spec)
	if err := c.Start(context.Background(), "scadad"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Stop(ctx, "scadad")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still stop pending") {
		t.Errorf("stop that never ends: %v", err)
	}
}

type record struct {
	kind string
	id   uint32
	msg  string
}

type recordSink struct {
	mu      sync.Mutex
	records []record
}

func (s *recordSink) add(kind string, id uint32, msg string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, record{kind, id, msg})
	return nil
}
func (s *recordSink) Info(id uint32, msg string) error    { return s.add("info", id, msg) }
func (s *recordSink) Warning(id uint32, msg string) error { return s.add("warning", id, msg) }
func (s *recordSink) Error(id uint32, msg string) error   { return s.add("error", id, msg) }
func (s *recordSink) all() []record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]record(nil), s.records...)
}

func TestEventWriterCopiesWarningsAndErrorsOnly(t *testing.T) {
	sink := &recordSink{}
	var file strings.Builder
	log := zerolog.New(zerolog.MultiLevelWriter(&file, EventWriter{Sink: sink})).With().Timestamp().Str("node", "node-a").Logger()
	log.Info().Msg("scadad started")
	log.Debug().Msg("noise")
	log.Warn().Str("http", "0.0.0.0:8080").Msg("http.insecure: plain HTTP")
	log.Error().Err(errors.New("disk full")).Int("entry", 42).Msg("state storage failed")
	log.Log().Msg("no level")
	got := sink.all()
	if len(got) != 2 {
		t.Fatalf("records %+v, want the warning and the error", got)
	}
	if got[0].kind != "warning" || got[0].id != EventWarning || got[0].msg != "http.insecure: plain HTTP\r\nhttp=0.0.0.0:8080\r\nnode=node-a" {
		t.Errorf("warning record %+v", got[0])
	}
	if got[1].kind != "error" || got[1].id != EventError || got[1].msg != "state storage failed\r\nentry=42\r\nerror=disk full\r\nnode=node-a" {
		t.Errorf("error record %+v", got[1])
	}
	if n := strings.Count(file.String(), "\n"); n != 5 {
		t.Errorf("the file got %d lines, want all 5:\n%s", n, file.String())
	}
}

func TestEventTextBoundsARecord(t *testing.T) {
	long := strings.Repeat("é", maxEventBytes)
	got := EventText([]byte(`{"level":"error","message":"` + long + `"}`))
	if len(got) > maxEventBytes+100 || !strings.HasSuffix(got, "(truncated; the log file has the whole line)") {
		t.Errorf("record of %d bytes, ends %q", len(got), got[len(got)-60:])
	}
	if !strings.HasPrefix(got, "éé") || strings.ContainsRune(got, '\uFFFD') {
		t.Error("truncation split a character")
	}
	if got := EventText([]byte("not json\n")); got != "not json" {
		t.Errorf("plain line: %q", got)
	}
}

func TestServeStopsTheDaemonOnStopAndRecordsStartAndStop(t *testing.T) {
	sink := &recordSink{}
	requests := make(chan Request)
	var mu sync.Mutex
	var states []State
	report := func(s State) { mu.Lock(); states = append(states, s); mu.Unlock() }
	daemonCtx := make(chan context.Context, 1)
	code := make(chan uint32, 1)
	go func() {
		code <- Serve(func(ctx context.Context) error {
			daemonCtx <- ctx
			<-ctx.Done()
			return nil
		}, requests, report, sink, "v0.2.0 (config C:\\scadad\\node.yaml)")
	}()
	ctx := <-daemonCtx
	requests <- Interrogate
	if ctx.Err() != nil {
		t.Fatal("interrogate stopped the daemon")
	}
	requests <- Stop
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit code %d after a stop, want 0", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Stop")
	}
	mu.Lock()
	got := states
	mu.Unlock()
	if len(got) != 4 || got[0] != StartPending || got[1] != Running || got[2] != Running || got[3] != StopPending {
		t.Errorf("reported %v, want start pending, running, running (interrogate), stop pending", got)
	}
	recs := sink.all()
	if len(recs) != 2 || recs[0].id != EventStarted || !strings.Contains(recs[0].msg, "v0.2.0") || recs[1].id != EventStopped || recs[1].kind != "info" {
		t.Errorf("event records %+v, want started (with the version) and stopped", recs)
	}
}

func TestServeExitsNonZeroOnAFatalErrorSoRecoveryRestartsIt(t *testing.T) {
	sink := &recordSink{}
	code := Serve(func(context.Context) error { return errors.New("state storage failed: disk full") },
		make(chan Request), func(State) {}, sink, "v0.2.0")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	recs := sink.all()
	if len(recs) != 2 || recs[1].kind != "error" || recs[1].id != EventFatal || !strings.Contains(recs[1].msg, "disk full") {
		t.Errorf("records %+v, want the fatal error", recs)
	}
	// Ending without a stop request is a failure too.
	if code := Serve(func(context.Context) error { return nil }, make(chan Request), func(State) {}, sink, "v0.2.0"); code != 1 {
		t.Errorf("exit without a stop request: code %d, want 1", code)
	}
}

// refusingFlagSCM registers the service but refuses the non-crash flag,
// as Wine's control manager does.
type refusingFlagSCM struct{ *fakeSCM }

// Recovery: Wine's control manager answers "Invalid level" to the query.
func (s refusingFlagSCM) Recovery(string) (Recovery, error) {
	return Recovery{}, errors.New("read the recovery actions: Invalid level.")
}

func (s refusingFlagSCM) SetRecovery(name string, r Recovery) error {
	if err := s.fakeSCM.SetRecovery(name, r); err != nil {
		return err
	}
	return errors.Join(ErrNonCrashRecoveryRefused, errors.New("Invalid level."))
}

func (s refusingFlagSCM) Create(spec Spec) error {
	if err := s.fakeSCM.Create(spec); err != nil {
		return err
	}
	return errors.Join(ErrNonCrashRecoveryRefused, errors.New("Invalid level."))
}

func TestInstallWarnsWhenTheNonCrashRecoveryIsRefused(t *testing.T) {
	var warnings []string
	c := Commands{Manager: refusingFlagSCM{newFakeSCM()}, Warn: func(m string) { warnings = append(warnings, m) }}
	spec, _ := NewSpec(`C:\scadad\scadad.exe`, `C:\scadad\node.yaml`)
	if err := c.Install(spec); err != nil {
		t.Fatalf("install: %v", err)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "not after a fatal error's exit") ||
		!strings.Contains(warnings[1], "cannot be read back (read the recovery actions: Invalid level.)") ||
		!strings.Contains(warnings[1], "`sc.exe failure scadad reset= 86400 actions= restart/5000/restart/30000/restart/60000` and `sc.exe failureflag scadad 1`") {
		t.Errorf("warnings %q", warnings)
	}
}

// storingSCM stores recovery actions other than those asked for, or
// drops the non-zero-exit flag without an error.
type storingSCM struct {
	*fakeSCM
	stored Recovery
}

func (s storingSCM) Recovery(string) (Recovery, error) { return s.stored, nil }

func TestInstallReadsTheRecoveryActionsBack(t *testing.T) {
	spec, _ := NewSpec(`C:\scadad\scadad.exe`, `C:\scadad\node.yaml`)
	for _, tc := range []struct {
		name string
		scm  Manager
		says string // "" = no warning
	}{
		{"stored as asked", newFakeSCM(), ""},
		{"none stored", storingSCM{newFakeSCM(), Recovery{}}, "stored the recovery actions [] (failures reset after 0s), not restarts after [5s 30s 1m0s] (reset after 24h0m0s)"},
		{"other delays", storingSCM{newFakeSCM(), Recovery{Restarts: []time.Duration{time.Minute}, ResetAfter: 24 * time.Hour, OnNonZeroExit: true}}, "stored the recovery actions [1m0s]"},
		{"flag dropped", storingSCM{newFakeSCM(), Recovery{Restarts: DefaultRecovery, ResetAfter: DefaultResetAfter}}, "does not apply its recovery actions on a non-zero exit: set it with `sc.exe failure scadad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warnings []string
			c := Commands{Manager: tc.scm, Warn: func(m string) { warnings = append(warnings, m) }}
			if err := c.Install(spec); err != nil {
				t.Fatalf("install: %v", err)
			}
			switch {
			case tc.says == "" && len(warnings) != 0:
				t.Errorf("warnings %q, want none", warnings)
			case tc.says != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tc.says)):
				t.Errorf("warnings %q, want one saying %q", warnings, tc.says)
			}
		})
	}
}

// An MSI registers the service without recovery actions (wixl has no
// ServiceConfigFailureActions); its custom action runs `scadad service
// recovery`, which sets them on the registered service.
func TestSetRecoveryOnAServiceRegisteredWithout(t *testing.T) {
	scm := newFakeSCM()
	spec, _ := NewSpec(`C:\scadad\scadad.exe`, `C:\scadad\node.yaml`)
	spec.Recovery, spec.ResetAfter = nil, 0
	if err := scm.Create(spec); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	c := Commands{Manager: scm, Warn: func(m string) { warnings = append(warnings, m) }}
	if err := c.SetRecovery(spec.Name); err != nil {
		t.Fatalf("set recovery: %v", err)
	}
	got, _ := scm.Recovery(spec.Name)
	if !slices.Equal(got.Restarts, DefaultRecovery) || got.ResetAfter != DefaultResetAfter || len(warnings) != 0 {
		t.Errorf("stored %+v, warnings %q", got, warnings)
	}
	if err := c.SetRecovery("other"); err == nil || !errors.Is(err, ErrNotInstalled) {
		t.Errorf("set recovery of a service not installed: %v", err)
	}
	warnings = nil
	c.Manager = refusingFlagSCM{scm}
	if err := c.SetRecovery(spec.Name); err != nil {
		t.Fatalf("set recovery under a control manager refusing the flag: %v", err)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "not after a fatal error's exit") || !strings.Contains(warnings[1], "sc.exe qfailure scadad") {
		t.Errorf("warnings %q", warnings)
	}
}
