// Package backoff computes retry delays: exponential from a floor, capped,
// with jitter so that many nodes or targets retrying at once spread apart.
// It owns only the arithmetic; callers own the clock and the randomness.
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
