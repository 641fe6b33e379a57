package storeforward

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Verdict is what a target kind makes of an answer refusing a delivery.
type Verdict struct {
	// Code is the receiver's answer: an HTTP status ("400"), a SQLSTATE
	// ("23502"), an MQTT reason code ("135"). park_on patterns match it.
	Code string
	// Permanent is the kind's own judgement: no retry of this message can
	// succeed (a malformed payload, a refused authorisation of this
	// message), so it is parked at once and the target moves on.
	Permanent bool
	// RetryAfter is how long the receiver asked to be left alone
	// (HTTP Retry-After on 429 and 503); 0 when it did not say.
	RetryAfter time.Duration
	// Unsendable: the message could not even be put in a request (no
	// receiver answered). It parks at once whatever park_on says.
	Unsendable bool
	// Hold: not a failure at all. The kind holds delivery on a state the
	// receiver's side announced (Sparkplug's primary host offline); the
	// message waits RetryAfter (a second when 0) and is tried again, and
	// the attempt neither counts toward max_attempts nor parks it.
	Hold bool
}

// Refusal is an error carrying the receiver's answer. A failure without
// one (no connection, no answer in time, a cancelled attempt) is always
// transient: a receiver that is down must never cost a message.
type Refusal interface {
	error
	Verdict() Verdict
}

// Park reasons, the reason label of scadad_sf_parked_total.
const (
	ParkRefused     = "refused"      // a permanent refusal, parked at once
	ParkMaxAttempts = "max_attempts" // the target's max_attempts failed attempts
)

// maxRetryAfter bounds a receiver's Retry-After: a wrong or hostile answer
// must not stop a target for days.
const maxRetryAfter = time.Hour

// ParkOnNone as a target's only park_on entry parks nothing at once: only
// max_attempts parks.
const ParkOnNone = "none"

// classify says whether err parks its message at once and how long the
// receiver asked to wait. parkOn, when set, replaces the kind's judgement
// of which answers are permanent.
func classify(err error, parkOn []string) (permanent bool, wait time.Duration) {
	var r Refusal
	if !errors.As(err, &r) {
		return false, 0
	}
	v := r.Verdict()
	wait = min(v.RetryAfter, maxRetryAfter)
	if len(parkOn) == 0 || v.Unsendable {
		return v.Permanent, wait
	}
	for _, p := range parkOn {
		if codeMatches(p, v.Code) {
			return true, wait
		}
	}
	return false, wait
}

// holdRecheck is how soon a hold that names no wait is tried again.
const holdRecheck = time.Second

// heldFor says whether err is a hold (Verdict.Hold), not a failed
// attempt, and how long to wait before trying again.
func heldFor(err error) (wait time.Duration, held bool) {
	var r Refusal
	if !errors.As(err, &r) || !r.Verdict().Hold {
		return 0, false
	}
	if wait = min(r.Verdict().RetryAfter, maxRetryAfter); wait <= 0 {
		wait = holdRecheck
	}
	return wait, true
}

// codeMatches reports whether a park_on pattern matches an answer code:
// the same length, each character equal or an 'x' in the pattern ("4xx",
// "23xxx"), letters compared without case.
func codeMatches(pattern, code string) bool {
	if len(pattern) != len(code) || code == "" {
		return false
	}
	for i := 0; i < len(pattern); i++ {
		p, c := lower(pattern[i]), lower(code[i])
		if p != 'x' && p != c {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// ValidateParkOn checks a target's park_on list: "none" alone, or answer
// codes and patterns of digits, letters and 'x' (1..16 characters).
func ValidateParkOn(parkOn []string) error {
	for i, p := range parkOn {
		if p == ParkOnNone {
			if len(parkOn) > 1 {
				return fmt.Errorf("park_on: %q must be the only entry", ParkOnNone)
			}
			continue
		}
		if p == "" || len(p) > 16 {
			return fmt.Errorf("park_on[%d]: %q: want an answer code or pattern of 1..16 characters (\"400\", \"4xx\", \"23505\") or %q", i, p, ParkOnNone)
		}
		for j := 0; j < len(p); j++ {
			c := lower(p[j])
			if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
				return fmt.Errorf("park_on[%d]: %q: only digits, letters and x (any character) are allowed", i, p)
			}
		}
	}
	return nil
}

// httpPermanent is the default classification of an HTTP answer: a 4xx
// says this request will never be accepted, except 408 (timeout), 425
// (too early) and 429 (too many requests), which say "later". Anything
// else (5xx, a 3xx the client does not follow) is transient.
func httpPermanent(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date
// (relative to now). Unreadable or past values are 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// errorText is err's message fit for the replicated state: valid UTF-8
// (a receiver's answer may be anything) and at most limit bytes, cut at a
// character boundary.
func errorText(err error, limit int) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
