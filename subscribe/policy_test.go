package subscribe

import (
	"testing"
	"time"
)

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
