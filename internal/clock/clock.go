// Package clock is the one time source every package that waits or stamps
// takes injected: the wall clock in production, clocktest.Fake in tests.
// It owns the interface and the wall clock only; it must not hold time of
// its own (no package state) or decide anything about timeouts.
package clock

import "time"

// Clock tells the time and makes timers. Packages take it in their options
// and default to System.
type Clock interface {
	Now() time.Time
	// After is time.After.
	After(d time.Duration) <-chan time.Time
	// NewTimer is time.NewTimer, for timers that are stopped early.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of time.Timer the callers use.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// System is the wall clock.
func System() Clock { return system{} }

type system struct{}

func (system) Now() time.Time                         { return time.Now() }
func (system) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (system) NewTimer(d time.Duration) Timer         { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time { return s.t.C }
func (s systemTimer) Stop() bool          { return s.t.Stop() }
