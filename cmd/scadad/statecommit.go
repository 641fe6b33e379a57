package main

import (
	"context"
	"errors"
	"time"

	"github.com/scadad/scadad/fsm"
)

// Applied entries wait in one open bbolt transaction of the state file
// until they total stateCommitBytes or stateCommitInterval passes
// (fsm.Options.CommitBytes): a commit then writes each page its entries
// touch once, where committing every raft batch wrote the same pages again
// and again. Readers see applied entries at once; the file lags by at most
// the interval, and the raft log, fsynced on every append, holds whatever
// it lacks. A commit rewrites every page its entries touched (each
// producer naming its own ids writes its own leaf of the id index), so the
// longer the interval the fewer rewrites per message: 200 ms rather than
// 50 ms cut the state file's CPU per message by about a quarter
// (BenchmarkHeldCommitsInterleaved in fsm), and a restart replays at most
// that much more of the log.
const (
	stateCommitInterval = 200 * time.Millisecond
	stateCommitBytes    = 4 << 20
)

// commitStateEvery commits the entries applied since the last commit every
// interval until ctx ends. A failed commit is the FSM's storage failure,
// which it reports and which stops it applying; nothing more to do here.
func commitStateEvery(ctx context.Context, state *fsm.FSM, every time.Duration) {
	everyTick(ctx, every, func() bool {
		return !errors.Is(state.Commit(), fsm.ErrClosed)
	})
}

// everyTick calls fn every interval until ctx ends or fn returns false.
func everyTick(ctx context.Context, every time.Duration, fn func() bool) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !fn() {
			return
		}
	}
}
