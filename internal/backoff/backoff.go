// Package backoff computes retry delays: exponential from a floor, capped,
// with jitter so that many nodes or targets retrying at once spread apart.
// It owns only the arithmetic; callers own the clock and the randomness.
// Two forms: Delay from a count of failures, Next from the current interval
// (for callers that keep the interval, such as the subscribe guard and the
// gateway's reconnect loop).
package backoff

import "time"

// jitterFraction spreads retries apart: a delay d becomes uniform in
// [d·(1−f), d·(1+f)].
const jitterFraction = 0.2

// Delay is the wait after the failures-th consecutive failure:
// floor·2^(failures−1), capped at max, with ±20 % jitter drawn from r in
// [0,1); never above max.
func Delay(floor, max time.Duration, failures int, r float64) time.Duration {
	if failures < 1 {
		failures = 1
	}
	d := max
	if shift := failures - 1; shift < 62 {
		if v := floor << shift; v > 0 && v>>shift == floor && v < max {
			d = v
		}
	}
	d = time.Duration(float64(d) * (1 - jitterFraction + 2*jitterFraction*r))
	if d > max {
		d = max
	}
	return d
}

// Next is the step from the current interval: double it with ±20 % jitter
// from r (uniform in [0,1]; 0.5 = none; clamped) and clamp to [floor,
// maxInterval]. A maxInterval below floor degrades to a fixed floor interval.
func Next(current, floor, maxInterval time.Duration, r float64) time.Duration {
	ceiling := max(maxInterval, floor)
	current = max(current, floor)
	j := min(max(r, 0), 1)
	next := time.Duration(float64(current) * 2 * (1 - jitterFraction + 2*jitterFraction*j))
	return min(max(next, floor), ceiling)
}
