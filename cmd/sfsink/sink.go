package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds one request body; larger bodies are refused with 413 (and
// recorded), like a real receiver would.
const maxBody = 64 << 20

// statusClientGone is recorded when the client went away before the answer
// (nginx's 499): the sender saw a failure, not an acknowledgement.
const statusClientGone = 499

// Record is one line of the record file.
type Record struct {
	// Seq numbers requests in arrival order, from 1.
	Seq  uint64 `json:"seq"`
	Time string `json:"time"` // arrival, RFC 3339 with nanoseconds, UTC
	ID   string `json:"id"`   // Idempotency-Key header
	// MessageIDs is a batch's X-Scadad-Message-Ids header as received.
	MessageIDs string `json:"message_ids,omitempty"`
	Epoch      string `json:"epoch"`
	Method     string `json:"method"`
	Path       string `json:"path"`
	Size       int    `json:"size"`
	SHA256     string `json:"sha256"`
	// Status is what the sink answered; only 2xx is an acknowledgement.
	Status int `json:"status"`
	// Body is the request body, recorded only with -bodies.
	Body []byte `json:"body,omitempty"`
}

type sink struct {
	rec *recorder

	failFirst  int64
	failRate   float64
	status     int
	bodies     bool
	retryAfter string

	seq      atomic.Uint64
	forced   atomic.Bool  // fail everything (control endpoint)
	delayNS  atomic.Int64 // answer delay
	okCount  atomic.Uint64
	errCount atomic.Uint64

	randMu sync.Mutex
	rand   *rand.Rand
}

func newSink(cfg config, rec *recorder) *sink {
	s := &sink{
		rec:        rec,
		failFirst:  cfg.failFirst,
		failRate:   cfg.failRate,
		status:     cfg.status,
		bodies:     cfg.bodies,
		retryAfter: cfg.retryAfter,
		rand:       rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)),
	}
	s.delayNS.Store(int64(cfg.delay))
	return s
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/control" {
		s.control(w, r)
		return
	}
	arrival := time.Now().UTC()
	seq := s.seq.Add(1)
	status := http.StatusOK
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		status = http.StatusBadRequest
	case len(body) > maxBody:
		status = http.StatusRequestEntityTooLarge
	case s.shouldFail(seq):
		status = s.status
	}
	if d := time.Duration(s.delayNS.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			status = statusClientGone
		}
	}
	sum := sha256.Sum256(body)
	rec := Record{
		Seq: seq, Time: arrival.Format(time.RFC3339Nano),
		ID: r.Header.Get("Idempotency-Key"), Epoch: r.Header.Get("X-Scadad-Epoch"),
		Method: r.Method, Path: r.URL.Path, Size: len(body), SHA256: hex.EncodeToString(sum[:]),
		Status: status, MessageIDs: r.Header.Get("X-Scadad-Message-Ids"),
	}
	if s.bodies && len(body) <= maxBody {
		rec.Body = body
	}
	line, err := json.Marshal(rec)
	if err == nil {
		err = s.rec.append(append(line, '\n'))
	}
	if err != nil {
		// Never acknowledge what is not recorded.
		s.errCount.Add(1)
		http.Error(w, "sfsink: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if status == statusClientGone {
		return
	}
	if status/100 == 2 {
		s.okCount.Add(1)
		w.WriteHeader(status)
		return
	}
	s.errCount.Add(1)
	if s.retryAfter != "" {
		w.Header().Set("Retry-After", s.retryAfter)
	}
	http.Error(w, fmt.Sprintf("sfsink: failing on purpose (%d)", status), status)
}

func (s *sink) shouldFail(seq uint64) bool {
	if s.forced.Load() {
		return true
	}
	if seq <= uint64(s.failFirst) {
		return true
	}
	if s.failRate <= 0 {
		return false
	}
	s.randMu.Lock()
	defer s.randMu.Unlock()
	return s.rand.Float64() < s.failRate
}

type controlState struct {
	Fail     bool   `json:"fail"`
	Delay    string `json:"delay"`
	Requests uint64 `json:"requests"`
	OK       uint64 `json:"ok"`
	Failed   uint64 `json:"failed"`
}

func (s *sink) control(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		q := r.URL.Query()
		if v := q.Get("fail"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				http.Error(w, fmt.Sprintf("control: fail=%q is not a boolean", v), http.StatusBadRequest)
				return
			}
			s.forced.Store(b)
		}
		if v := q.Get("delay"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				http.Error(w, fmt.Sprintf("control: delay=%q is not a non-negative duration", v), http.StatusBadRequest)
				return
			}
			s.delayNS.Store(int64(d))
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "control: method "+r.Method+" not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(controlState{
		Fail:     s.forced.Load(),
		Delay:    time.Duration(s.delayNS.Load()).String(),
		Requests: s.seq.Load(),
		OK:       s.okCount.Load(),
		Failed:   s.errCount.Load(),
	})
}
