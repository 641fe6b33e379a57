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

func TestNext(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name                  string
		current, floor, maxIv time.Duration
		jitter                float64
		want                  time.Duration
	}{
		{"doubles with no jitter", 5 * s, 5 * s, 60 * s, 0.5, 10 * s},
		{"jitter low edge -20%", 5 * s, 5 * s, 60 * s, 0, 8 * s},
		{"jitter high edge +20%", 5 * s, 5 * s, 60 * s, 1, 12 * s},
		{"never above max", 40 * s, 5 * s, 60 * s, 1, 60 * s},
		{"never below floor", 1 * s, 5 * s, 60 * s, 0, 8 * s},
		{"max below floor is fixed floor", 5 * s, 5 * s, 1 * s, 0.5, 5 * s},
		{"jitter clamped", 5 * s, 5 * s, 60 * s, 7, 12 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Next(tt.current, tt.floor, tt.maxIv, tt.jitter); got != tt.want {
				t.Fatalf("Next = %v, want %v", got, tt.want)
			}
		})
	}
}
