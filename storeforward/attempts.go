package storeforward

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
)

// attemptRecorder replicates failed attempts of pending messages in
// SFAttempts batches, at most one per AttemptsInterval: only each
// message's latest count and error are kept, so what waits is bounded by
// the messages under delivery. Recording is best effort: the buffer's
// attempts are what an operator sees and where the next Active node
// counts on from; a failed or refused commit (a cluster below the feature
// level that applies SFAttempts) drops the batch and is logged, and
// delivery goes on.
type attemptRecorder struct {
	d    *Deliverer
	log  zerolog.Logger
	mu   sync.Mutex
	wait map[string]*fsmpb.SFAttempt
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	lastRefusal string // logged once until it changes
}

func newAttemptRecorder(d *Deliverer, log zerolog.Logger) *attemptRecorder {
	return &attemptRecorder{
		d: d, log: log, wait: make(map[string]*fsmpb.SFAttempt),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// record notes a failed attempt of a pending message.
func (r *attemptRecorder) record(id string, attempts int, lastError string) {
	r.mu.Lock()
	r.wait[id] = &fsmpb.SFAttempt{Id: id, Attempts: uint32(attempts), LastError: lastError}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// forget drops what waits for id: it was delivered or is being parked
// (the park records its attempts itself).
func (r *attemptRecorder) forget(id string) {
	r.mu.Lock()
	delete(r.wait, id)
	r.mu.Unlock()
}

func (r *attemptRecorder) close() {
	close(r.stop)
	<-r.done
}

// take removes up to fsm.MaxBulk waiting entries, in id order (any order
// would do: the command is applied whole).
func (r *attemptRecorder) take() []*fsmpb.SFAttempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.wait) == 0 {
		return nil
	}
	ids := make([]string, 0, len(r.wait))
	for id := range r.wait {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	ids = ids[:min(len(ids), fsm.MaxBulk)]
	out := make([]*fsmpb.SFAttempt, len(ids))
	for i, id := range ids {
		out[i] = r.wait[id]
		delete(r.wait, id)
	}
	return out
}

func (r *attemptRecorder) run() {
	defer close(r.done)
	for {
		final := false
		select {
		case <-r.kick:
			select {
			case <-r.d.opts.Clock.After(r.d.opts.AttemptsInterval):
			case <-r.stop:
				final = true
			}
		case <-r.stop:
			final = true
		}
		for batch := r.take(); len(batch) > 0; batch = r.take() {
			timeout := 10 * time.Second
			if final {
				timeout = finalFlushTimeout
			}
			r.commit(batch, timeout)
		}
		if final {
			return
		}
	}
}

func (r *attemptRecorder) commit(batch []*fsmpb.SFAttempt, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := r.d.opts.Proposer.Propose(ctx, &fsmpb.Command{
		StampUnixNano: r.d.opts.Clock.Now().UnixNano(),
		Actor:         r.d.opts.Actor,
		Body:          &fsmpb.Command_SfAttempts{SfAttempts: &fsmpb.SFAttempts{Attempts: batch}},
	})
	if err == nil && res != nil && res.Err != nil {
		err = res.Err
	}
	if err == nil {
		r.lastRefusal = ""
		return
	}
	if msg := err.Error(); msg != r.lastRefusal {
		r.lastRefusal = msg
		r.log.Warn().Err(err).Int("messages", len(batch)).Msg("failed delivery attempts not recorded in the buffer (sf list shows older counts; delivery goes on)")
	}
}
