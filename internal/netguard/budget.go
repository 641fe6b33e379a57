package netguard

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// ErrBodyBudget: the bytes of request bodies buffered at once are at the
// budget; the request should be retried later.
var ErrBodyBudget = errors.New("request bodies being received are at the server's memory budget")

// BodyTooLargeError: a body is over its limit (announced or arrived).
type BodyTooLargeError struct{ Limit int }

func (e *BodyTooLargeError) Error() string {
	return fmt.Sprintf("request body over the limit of %d bytes", e.Limit)
}

// bodyChunk is how much a body buffer grows by at least: small enough that
// a client announcing a large body and sending nothing costs little, large
// enough that a full-size body takes few steps.
const bodyChunk = 16 << 10

// BodyBudget bounds the request-body bytes a server holds in buffers at
// once, whatever the bodies' headers announce: a buffer grows only as its
// bytes arrive, and each growth is charged to the budget first.
type BodyBudget struct {
	max  int64
	used atomic.Int64
}

// NewBodyBudget allows max bytes in flight; max <= 0 means no bound.
func NewBodyBudget(max int64) *BodyBudget { return &BodyBudget{max: max} }

// InUse is the bytes charged now.
func (b *BodyBudget) InUse() int64 { return b.used.Load() }

func (b *BodyBudget) reserve(n int64) bool {
	for {
		u := b.used.Load()
		if b.max > 0 && u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Read reads r to its end, at most limit bytes, and returns the body with
// the function that gives its bytes back to the budget (call it once the
// body's buffer is no longer needed; the body must not be used after).
// More than limit bytes is a *BodyTooLargeError; no room in the budget is
// ErrBodyBudget; a failed read is wrapped. On error nothing stays charged.
//
// announced is the length the request's header gives (negative: none): a
// small body announced truthfully takes one buffer of its size; a large
// announcement is believed only as its bytes arrive.
func (b *BodyBudget) Read(r io.Reader, announced, limit int) ([]byte, func(), error) {
	var buf []byte
	first := bodyChunk
	if announced >= 0 && announced < bodyChunk {
		first = announced + 1 // +1: room to see the end without growing
	}
	charged := int64(0)
	release := func() { b.used.Add(-charged) }
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				release()
				return nil, nil, &BodyTooLargeError{Limit: limit}
			}
			// One byte over the limit tells a body over it from one at it.
			next := min(max(2*cap(buf), bodyChunk), limit+1)
			if cap(buf) == 0 {
				next = min(first, limit+1)
			}
			if !b.reserve(int64(next - cap(buf))) {
				release()
				return nil, nil, ErrBodyBudget
			}
			charged += int64(next - cap(buf))
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if len(buf) > limit {
				release()
				return nil, nil, &BodyTooLargeError{Limit: limit}
			}
			return buf, release, nil
		}
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("read request body: %w", err)
		}
	}
}
