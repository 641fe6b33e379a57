package integrity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/promtest"
)

type fakeRejoiner struct{ calls int }

func (f *fakeRejoiner) Rejoin(ctx context.Context, reset func(context.Context) error) error {
	f.calls++
	return reset(ctx)
}

// damagedState opens a state with a few hundred pages of audit records and
// overwrites some of their page headers.
func damagedState(t *testing.T) *fsm.FSM {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fsm.db")
	state, err := fsm.Open(path, fsm.Options{Logger: zerolog.Nop(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { state.Close() })
	for i := range 3000 {
		data, err := fsm.Encode(&fsmpb.Command{Version: fsm.CommandVersion, StampUnixNano: int64(i + 1), Actor: "test",
			Body: &fsmpb.Command_Audit{Audit: &fsmpb.Audit{Kind: "k", Detail: strings.Repeat("d", 200)}}})
		if err != nil {
			t.Fatal(err)
		}
		state.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data})
	}
	if err := state.Commit(); err != nil {
		t.Fatal(err)
	}
	file, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for p := int64(8); p < 40; p++ {
		if _, err := file.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef, 0x77, 0x77}, p*4096); err != nil {
			t.Fatal(err)
		}
	}
	return state
}

// TestScrubberRebuildsOutsidePairModeOnly: a damaged state is rebuilt
// (fence, discard, rejoin) where a majority can lead without this node; in
// pair mode it only alerts, and the node keeps its role.
func TestScrubberRebuildsOutsidePairModeOnly(t *testing.T) {
	for _, pair := range []bool{false, true} {
		state := damagedState(t)
		node := &fakeRejoiner{}
		var logs lockedbuf.Buffer
		reg := prometheus.NewRegistry()
		m := NewScrubMetrics(reg)
		value := func(name string) float64 {
			v, _, err := promtest.Value(reg, name, "")
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		s := &Scrubber{Interval: time.Hour, Pair: pair, State: state, Node: node,
			Reset: func(context.Context) error { return nil }, Metrics: m, Log: zerolog.New(&logs), Now: time.Now}
		s.once(context.Background())
		if got := value("scadad_state_scrub_failures_total"); got != 1 {
			t.Errorf("pair=%v: %v scrub failures counted, want 1", pair, got)
		}
		if !strings.Contains(logs.String(), "STATE DAMAGED") {
			t.Errorf("pair=%v: no STATE DAMAGED in the log:\n%s", pair, logs.String())
		}
		switch {
		case pair && (node.calls != 0 || value("scadad_state_damaged") != 1):
			t.Errorf("pair mode: %d rejoins, damaged=%v; want none and 1", node.calls, value("scadad_state_damaged"))
		case !pair && (node.calls != 1 || value("scadad_state_rebuilds_total") != 1):
			t.Errorf("witness mode: %d rejoins, %v rebuilds; want 1 and 1", node.calls, value("scadad_state_rebuilds_total"))
		}
	}
}

// blockingRejoiner counts rejoins and holds each until released.
type blockingRejoiner struct {
	calls   atomic.Int32
	release chan struct{}
}

func (b *blockingRejoiner) Rejoin(ctx context.Context, reset func(context.Context) error) error {
	b.calls.Add(1)
	<-b.release
	return reset(ctx)
}

// TestConcurrentRebuildsRejoinOnce: the same damage reaches Rebuild from
// two places at once (the daemon's storage watch after a failed apply, the
// scrub's own read, a checkpoint): the node rejoins once, and every caller
// learns how that rebuild ended. Two rejoins discarded the state the first
// had just been sent.
func TestConcurrentRebuildsRejoinOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := &blockingRejoiner{release: make(chan struct{})}
		s := &Scrubber{Interval: time.Hour, Node: node, Reset: func(context.Context) error { return nil },
			Metrics: NewScrubMetrics(prometheus.NewRegistry()), Log: zerolog.Nop(), Now: time.Now}
		cause := fmt.Errorf("apply: %w", fsm.ErrDamagedState)
		results := make(chan bool, 2)
		for range 2 {
			go func() { results <- s.Rebuild(context.Background(), cause) }()
		}
		synctest.Wait()
		close(node.release)
		for range 2 {
			if !<-results {
				t.Error("a caller was told the rebuild failed")
			}
		}
		if got := node.calls.Load(); got != 1 {
			t.Fatalf("%d rejoins for one damage, want 1", got)
		}
		// A damage found after that rebuild is rebuilt again.
		node.release = make(chan struct{})
		close(node.release)
		if !s.Rebuild(context.Background(), cause) || node.calls.Load() != 2 {
			t.Fatalf("a later damage: %d rejoins in all, want 2", node.calls.Load())
		}
	})
}
