package subscribe

import (
	"testing"
	"time"
)

func TestNextInterval(t *testing.T) {
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
			if got := NextInterval(tt.current, tt.floor, tt.maxIv, tt.jitter); got != tt.want {
				t.Fatalf("NextInterval = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    RetryPolicy
		ok   bool
	}{
		{"defaults", DefaultRetryPolicy(), true},
		{"max equal floor", RetryPolicy{Floor: time.Second, Max: time.Second, InFlightCeiling: time.Second}, true},
		{"max below floor", RetryPolicy{Floor: 5 * time.Second, Max: 4 * time.Second, InFlightCeiling: time.Second}, false},
		{"zero ceiling", RetryPolicy{Floor: time.Second, Max: time.Second}, false},
		{"zero floor", RetryPolicy{Max: time.Second, InFlightCeiling: time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
