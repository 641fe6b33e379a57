package control

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
)

type fixedProposer struct {
	res *fsm.Result
	err error
}

func (p fixedProposer) Propose(context.Context, *fsmpb.Command) (*fsm.Result, error) {
	return p.res, p.err
}

// appliedFeed hands out one unbuffered channel: each send is received by
// the waiter before the next can start.
type appliedFeed struct{ ch chan uint64 }

func (a appliedFeed) Changes() (<-chan uint64, func()) { return a.ch, func() {} }

func TestSeenLocallyWaitsForTheLocalApply(t *testing.T) {
	feed := appliedFeed{ch: make(chan uint64)}
	p := SeenLocally{Proposer: fixedProposer{res: &fsm.Result{Index: 9}}, Applied: feed, MaxWait: time.Minute}
	done := make(chan *fsm.Result, 1)
	go func() {
		res, err := p.Propose(context.Background(), &fsmpb.Command{})
		if err != nil {
			t.Errorf("propose: %v", err)
		}
		done <- res
	}()
	for _, at := range []uint64{5, 8} {
		feed.ch <- at
	}
	select {
	case <-done:
		t.Fatal("Propose returned while the local state had applied only up to 8 of 9")
	default:
	}
	feed.ch <- 9
	select {
	case res := <-done:
		if res.Index != 9 {
			t.Fatalf("result index %d, want 9", res.Index)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Propose still waiting after the local state applied index 9")
	}
}

func TestSeenLocallyReturnsWithoutWaiting(t *testing.T) {
	refused := errors.New("no leader")
	cases := []struct {
		name    string
		prop    fixedProposer
		applied []uint64 // what the local state reports, buffered
		wantErr error
	}{
		{name: "applied already (the leader's own write)", prop: fixedProposer{res: &fsm.Result{Index: 4}}, applied: []uint64{7}},
		{name: "not committed", prop: fixedProposer{err: refused}, wantErr: refused},
		{name: "no entry index", prop: fixedProposer{res: &fsm.Result{}}},
		{name: "never applied here: bounded", prop: fixedProposer{res: &fsm.Result{Index: 4}}, applied: []uint64{2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			feed := appliedFeed{ch: make(chan uint64, len(tc.applied))}
			for _, at := range tc.applied {
				feed.ch <- at
			}
			p := SeenLocally{Proposer: tc.prop, Applied: feed, MaxWait: 50 * time.Millisecond}
			done := make(chan error, 1)
			go func() {
				_, err := p.Propose(context.Background(), &fsmpb.Command{})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Propose did not return")
			}
		})
	}
}
