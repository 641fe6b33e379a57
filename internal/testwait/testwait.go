// Package testwait is the one way tests and test harnesses wait for a
// condition: poll it until it holds or a deadline passes, and fail the test
// naming what it waited for. It must not be imported by production code.
// Timer-only logic is better tested with testing/synctest, which needs no
// deadline at all.
package testwait

import (
	"context"
	"testing"
	"time"
)

// maxPause bounds the pause between polls; the first is a millisecond.
const maxPause = 20 * time.Millisecond

// Poll calls cond until it holds (nil) or ctx ends (ctx's error).
func Poll(ctx context.Context, cond func() bool) error {
	_, err := PollDetail(ctx, func() (bool, string) { return cond(), "" })
	return err
}

// PollDetail is Poll for a condition that says why it does not hold yet; it
// returns the last reason with ctx's error.
func PollDetail(ctx context.Context, cond func() (bool, string)) (string, error) {
	pause := time.Millisecond
	t := time.NewTimer(pause)
	defer t.Stop()
	for {
		ok, detail := cond()
		if ok {
			return "", nil
		}
		t.Reset(pause)
		select {
		case <-ctx.Done():
			return detail, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, maxPause)
	}
}

// For polls cond until it holds; after timeout it fails t with what.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ForDetail(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// ForDetail is For for a condition that says why it does not hold yet: the
// last reason is in the failure.
func ForDetail(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	detail, err := PollDetail(ctx, cond)
	switch {
	case err == nil:
	case detail != "":
		t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, detail)
	default:
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
