package featuregate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
)

type countingApplier struct{ calls int }

func (c *countingApplier) Apply(context.Context, []byte) (interface{}, error) {
	c.calls++
	return &fsm.Result{Index: 7}, nil
}

type levels []fsm.NodeLevel

func (l levels) NodeLevels() ([]fsm.NodeLevel, error) { return l, nil }

func encode(t *testing.T, cmd *fsmpb.Command) []byte {
	t.Helper()
	b, err := fsm.Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGateRefusesTheProbeUntilEveryMemberApplies proves the gate with the
// test-only command one level above this release: refused while any
// member (a voter, the witness, a member with no record) is below it,
// committed once all record it.
func TestGateRefusesTheProbeUntilEveryMemberApplies(t *testing.T) {
	probe := encode(t, &fsmpb.Command{Body: &fsmpb.Command_FeatureProbe{FeatureProbe: &fsmpb.FeatureProbe{}}})
	next := fsm.FeatureLevel + 1
	members := func() ([]string, error) { return []string{"node-a", "node-b", "witness"}, nil }
	for _, tc := range []struct {
		name  string
		recs  levels
		lags  string
		allow bool
	}{
		{"witness behind", levels{{NodeID: "node-a", Level: next, Version: "v9"}, {NodeID: "node-b", Level: next, Version: "v9"}, {NodeID: "witness", Level: fsm.FeatureLevel, Version: "v0.2.0"}}, fmt.Sprintf("node witness records level %d (v0.2.0)", fsm.FeatureLevel), false},
		{"voter without a record", levels{{NodeID: "node-a", Level: next, Version: "v9"}, {NodeID: "witness", Level: next, Version: "v9"}}, "node node-b has recorded no feature level", false},
		{"all upgraded", levels{{NodeID: "node-a", Level: next, Version: "v9"}, {NodeID: "node-b", Level: next, Version: "v9"}, {NodeID: "witness", Level: next, Version: "v9"}}, "", true},
	} {
		app := &countingApplier{}
		g := &Gate{Next: app, Levels: tc.recs, Members: members}
		out, err := g.Apply(context.Background(), probe)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		res := out.(*fsm.Result)
		if tc.allow {
			if res.Err != nil || app.calls != 1 {
				t.Errorf("%s: err %v, calls %d; want committed", tc.name, res.Err, app.calls)
			}
			continue
		}
		if !errors.Is(res.Err, fsm.ErrFeatureLevel) || app.calls != 0 {
			t.Errorf("%s: err %v, calls %d; want a feature_level refusal", tc.name, res.Err, app.calls)
			continue
		}
		if !strings.Contains(res.Err.Error(), tc.lags) || !strings.Contains(res.Err.Error(), fmt.Sprintf("needs FSM feature level %d", next)) {
			t.Errorf("%s: %q does not name the lagging node (%q)", tc.name, res.Err, tc.lags)
		}
	}
}

// TestGatePassesLevelOneWithoutReading: v0.1.0's commands are never
// gated, and the hot path reads nothing.
func TestGatePassesLevelOneWithoutReading(t *testing.T) {
	app := &countingApplier{}
	g := &Gate{Next: app, Levels: nil, Members: func() ([]string, error) { return nil, errors.New("must not be called") }}
	out, err := g.Apply(context.Background(), encode(t, &fsmpb.Command{Body: &fsmpb.Command_Audit{Audit: &fsmpb.Audit{Kind: "k"}}}))
	if err != nil || out.(*fsm.Result).Err != nil || app.calls != 1 {
		t.Fatalf("out %+v err %v calls %d", out, err, app.calls)
	}
	out, _ = g.Apply(context.Background(), []byte{0xa2, 0x06, 0x00}) // body field 100, unknown
	if res := out.(*fsm.Result); !errors.Is(res.Err, fsm.ErrFeatureLevel) || app.calls != 1 {
		t.Fatalf("unknown body: %+v, calls %d", res, app.calls)
	}
}

// lateLevels is a replica whose records arrive while the gate looks.
type lateLevels struct {
	mu      sync.Mutex
	recs    levels
	changes chan uint64
	read    chan struct{} // closed at the first read
	once    sync.Once
}

func newLateLevels(recs levels) *lateLevels {
	return &lateLevels{recs: recs, changes: make(chan uint64, 1), read: make(chan struct{})}
}

func (l *lateLevels) NodeLevels() ([]fsm.NodeLevel, error) {
	l.once.Do(func() { close(l.read) })
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(levels(nil), l.recs...), nil
}

func (l *lateLevels) add(rec fsm.NodeLevel) {
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	l.changes <- 2
}

func (l *lateLevels) Changes() (<-chan uint64, func()) { return l.changes, func() {} }

// TestGateWaitsForAMemberThatHasNotRecordedYet: a node records its level
// a moment after it first hears a leader, so a gated command just after
// the cluster forms waits for that record (within RecordWait) instead of
// refusing the member as a release before v0.2.0. A member that records
// nothing within the wait is still refused, naming it.
func TestGateWaitsForAMemberThatHasNotRecordedYet(t *testing.T) {
	probe := encode(t, &fsmpb.Command{Body: &fsmpb.Command_FeatureProbe{FeatureProbe: &fsmpb.FeatureProbe{}}})
	next := fsm.FeatureLevel + 1
	members := func() ([]string, error) { return []string{"node-a", "node-b"}, nil }

	late := newLateLevels(levels{{NodeID: "node-a", Level: next, Version: "v9"}})
	app := &countingApplier{}
	g := &Gate{Next: app, Levels: late, Members: members, Changes: late.Changes, RecordWait: 10 * time.Second}
	go func() {
		<-late.read // the record lands after the gate has looked once
		late.add(fsm.NodeLevel{NodeID: "node-b", Level: next, Version: "v9"})
	}()
	out, err := g.Apply(context.Background(), probe)
	if err != nil {
		t.Fatal(err)
	}
	if res := out.(*fsm.Result); res.Err != nil || app.calls != 1 {
		t.Fatalf("err %v, calls %d; want the command committed once node-b recorded", res.Err, app.calls)
	}

	silent := newLateLevels(levels{{NodeID: "node-a", Level: next, Version: "v9"}})
	app = &countingApplier{}
	g = &Gate{Next: app, Levels: silent, Members: members, Changes: silent.Changes, RecordWait: 200 * time.Millisecond}
	began := time.Now()
	out, err = g.Apply(context.Background(), probe)
	if err != nil {
		t.Fatal(err)
	}
	res := out.(*fsm.Result)
	if !errors.Is(res.Err, fsm.ErrFeatureLevel) || app.calls != 0 || !strings.Contains(res.Err.Error(), "node node-b has recorded no feature level") {
		t.Fatalf("err %v, calls %d; want a refusal naming node-b", res.Err, app.calls)
	}
	if waited := time.Since(began); waited < 200*time.Millisecond {
		t.Errorf("refused after %s; want it to wait RecordWait (200ms) for the record", waited)
	}
}
