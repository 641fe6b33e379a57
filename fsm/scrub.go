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
// It holds one read transaction throughout. Applies wait while bbolt's
// consistency check runs (BenchmarkScrub's held-s) and go on beside the
// rest: the check compares the pages the transaction reaches with the
// database's free list, the live one, which a commit changes, so a commit
// beside it makes a healthy state look damaged and can race the check's
// read of the list (see boltsafe.Options.AfterCheck). Restore and Close
// wait for the scrub, and ctx ends it between its steps.
func (f *FSM) Scrub(ctx context.Context, bytesPerSecond int64) (digest string, applied uint64, err error) {
	// Not through viewCommitted: what the scrub finds is reported to the
	// caller, not made the FSM's storage failure (in pair mode the node
	// keeps serving on a damaged file).
	err = boltsafe.Guard(f.path, func() error {
		return f.viewQuiesced(func(tx *bolt.Tx, resume func()) error {
			applied = readMeta(tx).AppliedIndex
			handBack := f.handBack() // tx holds the map for both steps
			afterCheck := func() {
				resume()
				if handBack != nil {
					handBack()
				}
			}
			err := boltsafe.CheckTx(ctx, f.path, tx, boltsafe.Options{Full: true, BytesPerSecond: bytesPerSecond, AfterCheck: afterCheck})
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

// viewQuiesced commits the applied entries and runs fn in a read
// transaction with applies held off until fn calls resume (or returns):
// until then the database's free list is the one of fn's transaction.
func (f *FSM) viewQuiesced(fn func(tx *bolt.Tx, resume func()) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return ErrClosed
	}
	f.txMu.Lock()
	held := true
	resume := func() {
		if held {
			held = false
			f.txMu.Unlock()
		}
	}
	defer resume()
	if err := f.commitOpen(); err != nil {
		return err
	}
	tx, err := f.db.Begin(false)
	if err != nil {
		return fmt.Errorf("begin a read of the state: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(tx, resume)
}
