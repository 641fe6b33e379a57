package raftnode

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/clock/clocktest"
)

// overrideFixture is a pair-mode voter at t0 with one peer, b, and an
// override window of 10 s; heard(ago) says b was last heard ago.
func overrideFixture() (t0 time.Time, heard func(ago time.Duration) func(string) time.Time, base overrideInput) {
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	heard = func(ago time.Duration) func(string) time.Time {
		return func(string) time.Time { return t0.Add(-ago) }
	}
	return t0, heard, overrideInput{now: t0, mode: ModePair, after: 10 * time.Second, selfVoter: true, otherVoters: []string{"b"}}
}

func TestOverrideDue(t *testing.T) {
	t0, heard, base := overrideFixture()
	after := base.after
	cases := []struct {
		name   string
		change func(*overrideInput)
		want   bool
	}{
		{"silent for the whole window", func(in *overrideInput) { in.lastContact = heard(after) }, true},
		{"silent for longer", func(in *overrideInput) { in.lastContact = heard(time.Hour) }, true},
		{"heard just inside the window", func(in *overrideInput) { in.lastContact = heard(after - time.Millisecond) }, false},
		{"heard now", func(in *overrideInput) { in.lastContact = heard(0) }, false},
		{"witness mode", func(in *overrideInput) { in.mode = ModeWitness; in.lastContact = heard(time.Hour) }, false},
		{"strict mode", func(in *overrideInput) { in.mode = ModeStrict; in.lastContact = heard(time.Hour) }, false},
		{"already leader", func(in *overrideInput) { in.isLeader = true; in.lastContact = heard(time.Hour) }, false},
		{"recovering", func(in *overrideInput) { in.recovering = true; in.lastContact = heard(time.Hour) }, false},
		{"not a voter", func(in *overrideInput) { in.selfVoter = false; in.lastContact = heard(time.Hour) }, false},
		{"sole voter", func(in *overrideInput) { in.otherVoters = nil; in.lastContact = heard(time.Hour) }, false},
		{"one of two peers answering", func(in *overrideInput) {
			in.otherVoters = []string{"b", "c"}
			in.lastContact = func(id string) time.Time {
				if id == "c" {
					return t0
				}
				return t0.Add(-time.Hour)
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			tc.change(&in)
			got, reason := overrideDue(in)
			if got != tc.want {
				t.Fatalf("overrideDue = %v (%s), want %v", got, reason, tc.want)
			}
			if reason == "" {
				t.Fatal("no reason given")
			}
		})
	}
}

// TestContactWindowIsContinuous drives the tracker with a fake clock: any
// contact restarts the window, and a never-heard peer counts from start.
func TestContactWindowIsContinuous(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newContacts(clock)
	after := 10 * time.Second
	due := func() bool {
		ok, _ := overrideDue(overrideInput{now: clock.Now(), mode: ModePair, after: after, selfVoter: true, otherVoters: []string{"b"},
			lastContact: func(id string) time.Time { t, _ := c.lastContact(id); return t }})
		return ok
	}
	if _, ever := c.lastContact("b"); ever {
		t.Fatal("fresh tracker claims contact")
	}
	clock.Advance(after - time.Second)
	if due() {
		t.Fatal("due before a full window since start")
	}
	c.touch("b") // e.g. one probe answered just before the window ended
	clock.Advance(after - time.Millisecond)
	if due() {
		t.Fatal("due although the peer answered inside the window")
	}
	clock.Advance(time.Millisecond)
	if !due() {
		t.Fatal("not due after a full silent window")
	}
	c.restartWindow()
	if due() {
		t.Fatal("due right after the window was restarted")
	}
	clock.Advance(after)
	if !due() {
		t.Fatal("not due a full window after the restart")
	}
}

func TestHclogAdapterKeepsLevelsAndFields(t *testing.T) {
	var buf bytes.Buffer
	zl := zerolog.New(&buf).Level(zerolog.DebugLevel)
	a := newHclogAdapter(zl, "raft")
	a.Trace("dropped: below debug")
	a.Debug("dbg", "k", 1)
	a.Info("inf", "servers", hclog.Fmt("%d servers", 3))
	a.With("peer", "b").Warn("wrn", "err", errors.New("boom"))
	a.Named("transport").Error("err")
	a.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[WARN] from std log")

	got := jsonLines(t, buf.String())
	want := []struct{ level, msg, key, val string }{
		{"debug", "dbg", "k", "1"},
		{"info", "inf", "servers", "3 servers"},
		{"warn", "wrn", "peer", "b"},
		{"error", "err", "logger", "raft.transport"},
		{"warn", "from std log", "logger", "raft"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i, w := range want {
		m := got[i]
		if m["level"] != w.level || m["message"] != w.msg {
			t.Errorf("line %d = %v, want level %s message %s", i, m, w.level, w.msg)
		}
		if v, _ := json.Marshal(m[w.key]); strings.Trim(string(v), `"`) != w.val {
			t.Errorf("line %d field %s = %s, want %s", i, w.key, v, w.val)
		}
	}
	if got[2]["err"] != "boom" {
		t.Errorf("error field = %v", got[2]["err"])
	}
	if !a.IsDebug() || a.IsTrace() {
		t.Error("adapter level does not follow the zerolog level")
	}
}

func TestConfigValidation(t *testing.T) {
	good := func() Config {
		return Config{
			NodeID: "a", BindAddr: "127.0.0.1:0", DataDir: "/tmp/x", Mode: ModePair,
			Members:   []Member{{ID: "a", RaftAddr: "127.0.0.1:1"}, {ID: "b", RaftAddr: "127.0.0.1:2"}},
			ServerTLS: new(tls.Config), ClientTLS: new(tls.Config), FSM: &testFSM{},
		}
	}
	cases := []struct {
		name    string
		change  func(*Config)
		wantErr string
	}{
		{"valid pair", func(*Config) {}, ""},
		{"no TLS", func(c *Config) { c.ServerTLS = nil }, "no plaintext"},
		{"unknown mode", func(c *Config) { c.Mode = "yolo" }, "mode"},
		{"self not a member", func(c *Config) { c.NodeID = "z" }, "not among the members"},
		{"pair with a witness", func(c *Config) { c.Members[1].Witness = true }, "pair mode"},
		{"witness mode without witness", func(c *Config) { c.Mode = ModeWitness }, "exactly one witness"},
		{"duplicate member", func(c *Config) { c.Members[1].ID = "a" }, "listed twice"},
		{"probe slower than window", func(c *Config) { c.OverrideAfter = 100 * time.Millisecond }, "shorter than OverrideAfter"},
		{"no FSM", func(c *Config) { c.FSM = nil }, "FSM"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			c.applyDefaults()
			err := c.validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("validate: err = %v, want mention of %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaultsAreLANTuned(t *testing.T) {
	c := Config{NodeID: "w", Members: []Member{{ID: "w", RaftAddr: "x:1", Witness: true}}}
	c.applyDefaults()
	rc := c.raftConfig(newHclogAdapter(zerolog.Nop(), ""))
	if rc.PreVoteDisabled {
		t.Error("pre-vote is off")
	}
	if c.HeartbeatTimeout != 500*time.Millisecond || c.LeaderLeaseTimeout != 450*time.Millisecond {
		t.Errorf("timeouts = %s/%s", c.HeartbeatTimeout, c.LeaderLeaseTimeout)
	}
	if rc.ElectionTimeout != 3*DefaultElectionTimeout {
		t.Errorf("witness election timeout = %s, want 3x the voters'", rc.ElectionTimeout)
	}
	// The lease strictly below the heartbeat timeout: the dead-leader
	// watch lowers the timeout to the lease.
	if rc.HeartbeatTimeout != DefaultHeartbeatTimeout/2 || rc.LeaderLeaseTimeout >= rc.HeartbeatTimeout {
		t.Errorf("witness heartbeat timeout = %s (lease %s), want half the voters' and the lease below it", rc.HeartbeatTimeout, rc.LeaderLeaseTimeout)
	}
	voter := Config{NodeID: "a", Members: []Member{{ID: "a", RaftAddr: "x:1"}}}
	voter.applyDefaults()
	if vc := voter.raftConfig(newHclogAdapter(zerolog.Nop(), "")); vc.HeartbeatTimeout != DefaultHeartbeatTimeout || vc.ElectionTimeout != DefaultElectionTimeout {
		t.Errorf("voter timeouts = %s/%s", vc.HeartbeatTimeout, vc.ElectionTimeout)
	}
	if c.OverrideAfter != 10*time.Second {
		t.Errorf("OverrideAfter default = %s", c.OverrideAfter)
	}
}

// Raft's transport reading from a connection its own node closed (every
// clean stop) is debug; the same message with any other error stays an
// error. A leader stepping down for a newer term is info.
func TestHclogAdapterQuietsOwnClosedConnections(t *testing.T) {
	var buf bytes.Buffer
	a := newHclogAdapter(zerolog.New(&buf).Level(zerolog.InfoLevel), "raft")
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	a.Error("failed to decode incoming command", "error", closed)
	if buf.Len() != 0 {
		t.Fatalf("closing its own connection logged at info or above: %s", buf.String())
	}
	a.Error("failed to decode incoming command", "error", errors.New("unknown rpc type 9"))
	if got := jsonLines(t, buf.String()); len(got) != 1 || got[0]["level"] != "error" {
		t.Fatalf("a real decode failure: %s", buf.String())
	}
	buf.Reset()
	a.Error("peer has newer term, stopping replication", "peer", "node-a")
	if got := jsonLines(t, buf.String()); len(got) != 1 || got[0]["level"] != "info" || got[0]["peer"] != "node-a" {
		t.Fatalf("a leader stepping down for a newer term: %s", buf.String())
	}
}

// TestHclogAdapterHoldsBackRepeatedComplaints: raft's complaint about a
// peer that is down, made on every heartbeat, is logged once and then once
// every repeatEvery with how many were left out; other peers and other
// messages are not held back.

func TestHclogAdapterHoldsBackRepeatedComplaints(t *testing.T) {
	var buf bytes.Buffer
	a := newHclogAdapter(zerolog.New(&buf), "")
	now := time.Unix(1000, 0)
	a.repeats.now = func() time.Time { return now }
	down := errors.New("connection refused")
	for i := 0; i < 40; i++ { // 10 s of heartbeats at 4 a second
		a.Named("transport").Error("failed to heartbeat to", "peer", "127.0.0.1:7102", "error", down)
		now = now.Add(250 * time.Millisecond)
	}
	a.Error("failed to heartbeat to", "peer", "127.0.0.1:7103", "error", down)
	a.Error("failed to heartbeat to", "peer", "127.0.0.1:7102", "error", down)
	a.Error("failed to append to log")
	a.Error("failed to append to log")

	lines := jsonLines(t, buf.String())
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5 (first, other peer, first after 10 s, two others):\n%s", len(lines), buf.String())
	}
	if lines[0]["peer"] != "127.0.0.1:7102" || lines[0]["same_since_last_logged"] != nil {
		t.Errorf("first line %v", lines[0])
	}
	if lines[1]["peer"] != "127.0.0.1:7103" {
		t.Errorf("another peer's complaint held back: %v", lines[1])
	}
	if lines[2]["peer"] != "127.0.0.1:7102" || lines[2]["same_since_last_logged"] != float64(39) {
		t.Errorf("line after 10 s = %v, want the 39 left out counted", lines[2])
	}
	if lines[3]["message"] != "failed to append to log" || lines[4]["message"] != "failed to append to log" {
		t.Errorf("other messages held back: %v %v", lines[3], lines[4])
	}
}

func TestOverrideCountdown(t *testing.T) {
	t0, heard, base := overrideFixture()
	cases := []struct {
		name   string
		change func(*overrideInput)
		wantOK bool
		wantAt time.Time
	}{
		{"silent 3 s: override in 7 s", func(in *overrideInput) { in.lastContact = heard(3 * time.Second) }, true, t0.Add(7 * time.Second)},
		{"heard a moment ago", func(in *overrideInput) { in.lastContact = heard(500 * time.Millisecond) }, false, time.Time{}},
		{"witness mode", func(in *overrideInput) { in.mode = ModeWitness; in.lastContact = heard(time.Hour) }, false, time.Time{}},
		{"leader", func(in *overrideInput) { in.isLeader = true; in.lastContact = heard(time.Hour) }, false, time.Time{}},
		{"sole voter", func(in *overrideInput) { in.otherVoters = nil; in.lastContact = heard(time.Hour) }, false, time.Time{}},
		{"one of two peers heard", func(in *overrideInput) {
			in.otherVoters = []string{"b", "c"}
			in.lastContact = func(id string) time.Time {
				if id == "c" {
					return t0
				}
				return t0.Add(-time.Hour)
			}
		}, false, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			tc.change(&in)
			at, ok := overrideCountdown(in)
			if ok != tc.wantOK || !at.Equal(tc.wantAt) {
				t.Fatalf("overrideCountdown = %v, %v; want %v, %v", at, ok, tc.wantAt, tc.wantOK)
			}
		})
	}
}

// jsonLines decodes a zerolog output, one JSON object a line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestShownIndexes(t *testing.T) {
	for _, tc := range []struct {
		name                                string
		raftCommit, raftApplied, fsmApplied uint64
		commit, applied                     uint64
	}{
		{"steady", 120, 120, 118, 120, 120},
		{"applying", 130, 125, 125, 130, 125},
		// A restarted follower: raft replays nothing the state machine
		// holds and knows no commit index until the leader's next append.
		{"restarted follower", 0, 40, 118, 118, 118},
		{"fresh node", 0, 0, 0, 0, 0},
	} {
		commit, applied := shownIndexes(tc.raftCommit, tc.raftApplied, tc.fsmApplied)
		if commit != tc.commit || applied != tc.applied {
			t.Errorf("%s: shownIndexes(%d, %d, %d) = %d/%d, want %d/%d", tc.name, tc.raftCommit, tc.raftApplied, tc.fsmApplied, commit, applied, tc.commit, tc.applied)
		}
	}
}

// The guard ticks at the end of an override countdown, not up to a probe
// interval after it: the override then happens when it is due. A
// countdown that has ended (the override was refused: a peer answered)
// does not shorten the interval, or a refused override would probe the
// peer in a tight loop.
func TestNextGuardTickMeetsTheOverride(t *testing.T) {
	now := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	interval := 300 * time.Millisecond
	cases := []struct {
		name string
		at   time.Time
		want time.Duration
	}{
		{"no countdown", time.Time{}, interval},
		{"due after the next tick", now.Add(time.Second), interval},
		{"due before the next tick", now.Add(120 * time.Millisecond), 120*time.Millisecond + overrideTickMargin},
		{"due right now", now, interval},
		{"already past", now.Add(-50 * time.Millisecond), interval},
	}
	for _, tc := range cases {
		if got := nextGuardTick(interval, now, tc.at); got != tc.want {
			t.Errorf("%s: next tick in %v, want %v", tc.name, got, tc.want)
		}
	}
}
