package testwait

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a failure instead of ending the
// test, so the failure path can be checked.
type recorder struct {
	testing.TB
	failed atomic.Bool
	msg    string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed.Store(true)
	r.msg = format
	for _, a := range args {
		if s, ok := a.(string); ok {
			r.msg += " " + s
		}
	}
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	rec := &recorder{TB: t}
	For(rec, 5*time.Second, "three polls", func() bool { return n.Add(1) >= 3 })
	if rec.failed.Load() || n.Load() != 3 {
		t.Fatalf("failed %v after %d polls", rec.failed.Load(), n.Load())
	}
}

func TestForDetailFailsWithTheLastReason(t *testing.T) {
	rec := &recorder{TB: t}
	start := time.Now()
	ForDetail(rec, 30*time.Millisecond, "never", func() (bool, string) { return false, "still no" })
	if !rec.failed.Load() || !strings.Contains(rec.msg, "never") || !strings.Contains(rec.msg, "still no") {
		t.Fatalf("failed %v, message %q", rec.failed.Load(), rec.msg)
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Fatal("gave up before the deadline")
	}
}
