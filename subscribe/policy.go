package subscribe

import (
	"errors"
	"fmt"
	"time"
)

// RetryPolicy is the Lever 1 retry configuration.
type RetryPolicy struct {
	// Floor is the first retry interval and the one a reset returns to (5 s).
	Floor time.Duration
	// Max caps the backoff (60 s).
	Max time.Duration
	// InFlightCeiling is how long an unanswered subscribe blocks a new one
	// before its reply is presumed lost (45 s). Size it above the gateway's
	// per-command deadline.
	InFlightCeiling time.Duration
}

// DefaultRetryPolicy returns the seeds' defaults: 5 s floor, 60 s max, 45 s ceiling.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Floor: 5 * time.Second, Max: 60 * time.Second, InFlightCeiling: 45 * time.Second}
}

// withDefaults fills zero fields from DefaultRetryPolicy.
func (p RetryPolicy) withDefaults() RetryPolicy { return p.filledFrom(DefaultRetryPolicy()) }

// filledFrom fills p's zero fields from d (a zero max never below the
// floor).
func (p RetryPolicy) filledFrom(d RetryPolicy) RetryPolicy {
	if p.Floor == 0 {
		p.Floor = d.Floor
	}
	if p.Max == 0 {
		p.Max = max(d.Max, p.Floor)
	}
	if p.InFlightCeiling == 0 {
		p.InFlightCeiling = d.InFlightCeiling
	}
	return p
}

// Validate reports a policy that cannot work.
func (p RetryPolicy) Validate() error {
	var errs []error
	if p.Floor <= 0 {
		errs = append(errs, fmt.Errorf("retry floor must be > 0 (was %s)", p.Floor))
	}
	if p.Max < p.Floor {
		errs = append(errs, fmt.Errorf("retry max must be >= floor (was %s vs %s)", p.Max, p.Floor))
	}
	if p.InFlightCeiling <= 0 {
		errs = append(errs, fmt.Errorf("in-flight ceiling must be > 0 (was %s)", p.InFlightCeiling))
	}
	return errors.Join(errs...)
}
