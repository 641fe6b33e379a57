package fsm

import (
	"context"
	"time"
)

// dutyCycle keeps a background walk (a scrub, a checkpoint digest) to a
// share of one core: after each stretch of work it sleeps so that work
// takes at most share of the wall time. A walk is one goroutine that does
// not block, so its wall time working is its CPU time.
type dutyCycle struct {
	share float64
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
	since time.Time // start of the current stretch of work
}

// newDutyCycle returns nil (no pacing) for a share of 0 or 1 and above.
func newDutyCycle(share float64, now func() time.Time, sleep func(context.Context, time.Duration) error) *dutyCycle {
	if share <= 0 || share >= 1 {
		return nil
	}
	return &dutyCycle{share: share, now: now, sleep: sleep, since: now()}
}

// pause sleeps for the rest of the cycle the work since the last pause
// began.
func (d *dutyCycle) pause(ctx context.Context) error {
	if d == nil {
		return nil
	}
	worked := d.now().Sub(d.since)
	if rest := time.Duration(float64(worked) * (1 - d.share) / d.share); rest >= time.Millisecond {
		if err := d.sleep(ctx, rest); err != nil {
			return err
		}
		d.since = d.now()
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
