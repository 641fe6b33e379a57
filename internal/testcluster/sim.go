//go:build unix

package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Sim is a running mxgw-sim process: the field gateway of the tests.
type Sim struct {
	Addr   string // gRPC gateway address
	Admin  string // HTTP admin address
	bin    string
	dir    string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartSim runs mxgw-sim on free loopback ports with extra flags, logging
// into dir.
func StartSim(bin *Binaries, dir string, args ...string) (*Sim, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	s := &Sim{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), Admin: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		bin: bin.MxgwSim, dir: dir, args: args}
	return s, s.Start()
}

// Start runs the simulator (again, after Kill) on its addresses with its
// flags: a gateway that comes back after a crash, with fresh sessions.
func (s *Sim) Start() error {
	logf, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("mxgw-sim-%d.log", time.Now().UnixNano())))
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, append([]string{"-listen", s.Addr, "-admin", s.Admin}, s.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start mxgw-sim: %w", err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() {
		cmd.Wait()
		logf.Close()
		close(exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Stats(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Close()
			return fmt.Errorf("mxgw-sim did not answer on %s", s.Admin)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill SIGKILLs the simulator: every session's connection drops at once,
// as when the gateway host crashes. Start runs it again.
func (s *Sim) Kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// SimStats is the part of the simulator's counters the tests read.
type SimStats struct {
	Commands         map[string]int64 `json:"commands"`
	Sessions         int              `json:"sessions"`
	AdvisedItems     int              `json:"advised_items"`
	EventsSent       int64            `json:"events_sent"`
	StaleEpochWrites int64            `json:"stale_epoch_writes"`
}

// Stats reads the simulator's counters.
func (s *Sim) Stats() (SimStats, error) {
	var st SimStats
	resp, err := httpClient.Get("http://" + s.Admin + "/stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// Close stops the simulator.
func (s *Sim) Close() { terminate(s.cmd.Process, s.exited) }
