package storeforward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/backoff"
)

// remover commits delivered ids in batches: while one SFDelivered is in
// flight the next batch accumulates.
type remover struct {
	d    *Deliverer
	log  zerolog.Logger
	mu   sync.Mutex
	ids  []string
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// finalFlushTimeout bounds the last SFDelivered of a stopping worker. If it
// fails the ids are delivered again by the next Active node (at-least-once).
const finalFlushTimeout = 3 * time.Second

func newRemover(d *Deliverer, log zerolog.Logger) *remover {
	return &remover{d: d, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (r *remover) add(id string) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *remover) close() {
	close(r.stop)
	<-r.done
}

func (r *remover) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.ids), r.d.opts.RemoveBatch)
	if n == 0 {
		return nil
	}
	out := append([]string(nil), r.ids[:n]...)
	r.ids = r.ids[n:]
	return out
}

func (r *remover) putBack(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(ids, r.ids...)
}

func (r *remover) run() {
	defer close(r.done)
	failures := 0
	for {
		final := false
		select {
		case <-r.kick:
			if r.d.opts.RemoveDelay > 0 {
				select {
				case <-r.d.opts.Clock.After(r.d.opts.RemoveDelay):
				case <-r.stop:
					final = true
				}
			}
		case <-r.stop:
			final = true
		}
		for ids := r.take(); len(ids) > 0; ids = r.take() {
			timeout := 10 * time.Second
			if final {
				timeout = finalFlushTimeout
			}
			err := r.commit(ids, timeout)
			if err == nil {
				failures = 0
				if !final && r.d.opts.RemoveDelay > 0 && len(ids) < r.d.opts.RemoveBatch {
					// What gathered during the commit waits for the
					// next delay (its adds left a kick); only a full
					// batch, a backlog, goes on at once.
					break
				}
				continue
			}
			var cerr *fsm.CommandError
			if final || errors.As(err, &cerr) {
				r.log.Warn().Err(err).Int("ids", len(ids)).Msg("delivered ids not removed; they will be delivered again")
				continue
			}
			failures++
			r.log.Error().Err(err).Int("ids", len(ids)).Msg("remove delivered messages")
			r.putBack(ids)
			select {
			case <-r.d.opts.Clock.After(backoff.Delay(100*time.Millisecond, 5*time.Second, failures, r.d.opts.Jitter())):
			case <-r.stop:
				final = true
			}
		}
		if final {
			return
		}
	}
}

func (r *remover) commit(ids []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r.d.opts.Metrics.observeRemoveBatch(len(ids))
	res, err := r.d.opts.Proposer.Propose(ctx, &fsmpb.Command{
		StampUnixNano: r.d.opts.Clock.Now().UnixNano(),
		Actor:         r.d.opts.Actor,
		Body:          &fsmpb.Command_SfDelivered{SfDelivered: &fsmpb.SFDelivered{Ids: ids}},
	})
	if err != nil {
		return fmt.Errorf("commit %d delivered ids: %w", len(ids), err)
	}
	if res != nil && res.Err != nil {
		return fmt.Errorf("commit %d delivered ids: %w", len(ids), res.Err)
	}
	return nil
}
