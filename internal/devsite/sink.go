package devsite

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// maxSinkBody bounds one delivery the sink takes; a larger one is
// answered 413 (and not recorded), as a real receiver would.
const maxSinkBody = 16 << 20

// Delivery is one line of the sink's record.
type Delivery struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Path string    `json:"path"`
	// ID is the delivery's Idempotency-Key: one per message, the same on
	// every retry of it.
	ID string `json:"id"`
	// Body is a JSON body as it came; Text is any other body.
	Body json.RawMessage `json:"body,omitempty"`
	Text string          `json:"text,omitempty"`
}

// Sink is the demo's upstream system: it answers a delivery 204 once its
// line, body included, is on disk, so what it acknowledged is in the file.
type Sink struct {
	now func() time.Time

	mu  sync.Mutex
	f   *os.File
	seq uint64
}

// OpenSink appends to the record file at path.
func OpenSink(path string, now func() time.Time) (*Sink, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open the sink's record: %w", err)
	}
	return &Sink{now: now, f: f}, nil
}

// Close closes the record file.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Close()
}

func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		http.Error(w, "deliveries are POST or PUT", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSinkBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, fmt.Sprintf("body over %d bytes", maxSinkBody), http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.record(r.URL.Path, r.Header.Get("Idempotency-Key"), body); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Sink) record(path, id string, body []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	d := Delivery{Seq: s.seq, Time: s.now().UTC(), Path: path, ID: id}
	if json.Valid(body) {
		d.Body = body
	} else {
		d.Text = string(body)
	}
	line, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("record a delivery: %w", err)
	}
	if _, err := s.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("record a delivery: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("record a delivery: %w", err)
	}
	return nil
}
