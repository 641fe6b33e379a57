package fsm

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/internal/boltsafe"
)

// Scrub checks the committed state file whole while the FSM runs: bbolt's
// consistency check of every reachable page, a walk of every key and value
// (the digest's, so a page that panics bbolt is found here and not by a
// reader) at no more than Options.DigestCPUShare of one core, and a read of
// every byte of the file at no more than bytesPerSecond (0: unbounded). It returns the digest of the state it
// checked and its applied index. A damaged state is an error wrapping
// ErrDamagedState; the caller decides what follows (rebuild from raft).
//
// It holds one read transaction throughout, so applies go on; Restore and
// Close wait for it, and ctx ends it between its steps.
func (f *FSM) Scrub(ctx context.Context, bytesPerSecond int64) (digest string, applied uint64, err error) {
	// Not through viewCommitted: what the scrub finds is reported to the
	// caller, not made the FSM's storage failure (in pair mode the node
	// keeps serving on a damaged file).
	err = boltsafe.Guard(f.path, func() error {
		return f.viewCommittedRaw(func(tx *bolt.Tx) error {
			applied = readMeta(tx).AppliedIndex
			handBack := f.handBack() // tx holds the map for both steps
			err := boltsafe.CheckTx(ctx, f.path, tx, boltsafe.Options{Full: true, BytesPerSecond: bytesPerSecond, HandBack: handBack})
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			digest, err = digestTxCtx(ctx, tx, f.opts.DigestCPUShare, handBack)
			if err != nil {
				return fmt.Errorf("%w %s: walk: %v", boltsafe.ErrDamaged, f.path, err)
			}
			return nil
		})
	})
	if err != nil {
		return "", 0, damaged(f.path, fmt.Errorf("scrub: %w", err))
	}
	return digest, applied, nil
}

// viewCommittedRaw is viewCommitted without the read guard.
func (f *FSM) viewCommittedRaw(fn func(tx *bolt.Tx) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return ErrClosed
	}
	if err := f.commitLocked(); err != nil {
		return err
	}
	return f.db.View(fn)
}
