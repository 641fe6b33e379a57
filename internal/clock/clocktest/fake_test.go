package clocktest

import (
	"testing"
	"time"
)

func TestFakeFiresOnlyWhenPassed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(t0)
	a := c.After(2 * time.Second)
	stopped := c.NewTimer(time.Second)
	if !stopped.Stop() {
		t.Fatal("Stop of a waiting timer reports false")
	}
	c.Advance(time.Second)
	select {
	case <-a:
		t.Fatal("fired a second early")
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if c.Waiting() != 1 {
		t.Fatalf("waiting %d, want 1", c.Waiting())
	}
	c.Advance(time.Second)
	if got := <-a; !got.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("fired at %v", got)
	}
	now := c.After(0)
	select {
	case <-now:
	default:
		t.Fatal("After(0) did not fire at once")
	}
	late := c.After(time.Hour)
	c.FireAll()
	if got := <-late; !got.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("FireAll moved the time: %v", got)
	}
	if c.Created() != 4 {
		t.Fatalf("created %d timers, want 4", c.Created())
	}
}
