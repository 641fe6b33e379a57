package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	const floor, max = 100 * time.Millisecond, 5 * time.Second
	cases := []struct {
		failures int
		r        float64
		want     time.Duration
	}{
		{1, 0.5, 100 * time.Millisecond}, // no jitter at the middle draw
		{2, 0.5, 200 * time.Millisecond},
		{3, 0.5, 400 * time.Millisecond},
		{3, 0, 320 * time.Millisecond},        // −20 %
		{3, 0.999999, 480 * time.Millisecond}, // just under +20 %
		{7, 0.5, 5 * time.Second},             // 6.4 s capped
		{7, 0.999999, 5 * time.Second},        // jitter never exceeds max
		{0, 0.5, 100 * time.Millisecond},      // treated as the first failure
		{200, 0.5, 5 * time.Second},           // no overflow
	}
	for _, c := range cases {
		got := Delay(floor, max, c.failures, c.r)
		if diff := got - c.want; diff < -time.Millisecond || diff > time.Millisecond {
			t.Errorf("Delay(failures=%d, r=%v) = %v, want %v", c.failures, c.r, got, c.want)
		}
	}
}
