package main

import (
	"errors"
	"testing"
	"time"
)

// A stall is acted on only once every look has found it for stallConfirm:
// an operation that looks overdue when the process wakes from a pause and
// returns at the next look does not stop the node.
func TestLastingReportsOnlyAFailureSeenThroughout(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	now := t0
	stalled := errors.New("stalled")
	var current error
	check := lasting(2*time.Second, func() time.Time { return now }, func() error { return current })

	look := func(at time.Duration, want error) {
		t.Helper()
		now = t0.Add(at)
		if got := check(); !errors.Is(got, want) || (want == nil && got != nil) {
			t.Fatalf("at %s: %v, want %v", at, got, want)
		}
	}
	current = stalled // overdue on waking
	look(0, nil)
	current = nil // returned at the next look
	look(250*time.Millisecond, nil)
	current = stalled // a real stall starts over
	look(time.Second, nil)
	look(2900*time.Millisecond, nil)
	look(3*time.Second, stalled)
	look(3250*time.Millisecond, stalled)
}
