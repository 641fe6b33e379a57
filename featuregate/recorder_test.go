package featuregate

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/role"
)

type roles struct {
	mu  sync.Mutex
	cur role.State
	ch  chan role.State
}

func (r *roles) Current() role.State { r.mu.Lock(); defer r.mu.Unlock(); return r.cur }
func (r *roles) Watch() (<-chan role.State, func()) {
	return r.ch, func() {}
}
func (r *roles) set(st role.State) {
	r.mu.Lock()
	r.cur = st
	r.mu.Unlock()
	r.ch <- st
}

type proposer struct{ got chan *fsmpb.RecordFeatures }

func (p *proposer) Propose(_ context.Context, cmd *fsmpb.Command) (*fsm.Result, error) {
	p.got <- cmd.GetRecordFeatures()
	return &fsm.Result{}, nil
}

type localLevels struct {
	mu   sync.Mutex
	recs []fsm.NodeLevel
}

func (l *localLevels) NodeLevels() ([]fsm.NodeLevel, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recs, nil
}

// TestRecorderRecordsAtEveryLeaderChange: once a leader is known, again
// for a new leader (whose replica may lack it), and not while the local
// replica holds it.
func TestRecorderRecordsAtEveryLeaderChange(t *testing.T) {
	rs := &roles{ch: make(chan role.State, 4)}
	p := &proposer{got: make(chan *fsmpb.RecordFeatures, 8)}
	local := &localLevels{recs: []fsm.NodeLevel{{NodeID: "node-b", Level: fsm.FeatureLevel, Version: "v0.2.0"}}}
	r := &Recorder{NodeID: "node-b", Level: fsm.FeatureLevel, Version: "v0.2.0", Propose: p, Local: local, Roles: rs,
		Every: 20 * time.Millisecond, Retry: 10 * time.Millisecond, Now: time.Now, Log: zerolog.Nop()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()

	expectNone := func(why string) {
		select {
		case got := <-p.got:
			t.Fatalf("%s: recorded %+v", why, got)
		case <-time.After(100 * time.Millisecond):
		}
	}
	expect := func(why string) {
		select {
		case got := <-p.got:
			if got.NodeId != "node-b" || got.Level != uint32(fsm.FeatureLevel) || got.Version != "v0.2.0" {
				t.Fatalf("%s: recorded %+v", why, got)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: nothing recorded", why)
		}
	}
	expectNone("no leader yet")
	rs.set(role.State{Leader: "node-a"})
	expect("first leader")
	expectNone("same leader, local record present")
	rs.set(role.State{Leader: "node-b"})
	expect("new leader")
	local.mu.Lock()
	local.recs = nil
	local.mu.Unlock()
	expect("local record missing")
}
