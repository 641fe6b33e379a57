//go:build unix

package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Sim is a running mxgw-sim process: the field gateway of the tests.
type Sim struct {
	Addr   string // gRPC gateway address
	Admin  string // HTTP admin address
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
	s := &Sim{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), Admin: fmt.Sprintf("127.0.0.1:%d", ports[1]), exited: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("mxgw-sim-%d.log", time.Now().UnixNano())))
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin.MxgwSim, append([]string{"-listen", s.Addr, "-admin", s.Admin}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start mxgw-sim: %w", err)
	}
	go func() {
		s.cmd.Wait()
		logf.Close()
		close(s.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Stats(); err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("mxgw-sim did not answer on %s", s.Admin)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
