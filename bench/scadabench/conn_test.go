//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
)

// TestConnEnqueuer checks the lean load-generator client against net/http's
// server: what it sends, that sequential calls reuse one connection, that
// concurrent calls get their own, that a refusal is an error naming the
// status, and that a connection the server closes is replaced.
func TestConnEnqueuer(t *testing.T) {
	type seen struct{ method, path, key, body string }
	block := make(chan struct{})
	var (
		mu    sync.Mutex
		got   []seen
		conns = map[string]bool{}
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), string(body)})
		conns[r.RemoteAddr] = true
		mu.Unlock()
		switch string(body) {
		case "wait":
			<-block
			w.WriteHeader(http.StatusCreated)
		case "refuse":
			http.Error(w, "no such target", http.StatusNotFound)
		case "close":
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"x"}`)
		}
	}))
	srv.Start()
	defer srv.Close()
	var once sync.Once
	release := func() { once.Do(func() { close(block) }) }
	defer release() // before srv.Close, which waits for handlers
	addr := strings.TrimPrefix(srv.URL, "http://")
	e := &connEnqueuer{addr: addr, path: "/v1/sf/bench"}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for i, id := range []string{"a/1", "a/2", "a/3"} {
		if err := e.enqueue(ctx, id, []byte("payload")); err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
	}
	mu.Lock()
	if len(got) != 3 || got[1] != (seen{"POST", "/v1/sf/bench", "a/2", "payload"}) {
		t.Fatalf("server saw %+v", got)
	}
	if len(conns) != 1 {
		t.Fatalf("three sequential enqueues used %d connections, want 1", len(conns))
	}
	mu.Unlock()

	err := e.enqueue(ctx, "r", []byte("refuse"))
	if err == nil || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "no such target") {
		t.Fatalf("refused enqueue: err = %v, want HTTP 404 with the server's words", err)
	}
	if err := e.enqueue(ctx, "c", []byte("close")); err != nil {
		t.Fatalf("enqueue answered with Connection: close: %v", err)
	}
	if err := e.enqueue(ctx, "after", []byte("payload")); err != nil {
		t.Fatalf("enqueue after the server closed the connection: %v", err)
	}
	mu.Lock()
	if len(conns) != 2 {
		t.Fatalf("%d connections after one was closed by the server, want 2", len(conns))
	}
	mu.Unlock()

	// Two calls at once each need a connection of their own.
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, id := range []string{"p/1", "p/2"} {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- e.enqueue(ctx, id, []byte("wait")) }()
	}
	testwait.ForDetail(t, 5*time.Second, "3 connections in all while two enqueues wait (one more than before)", func() (bool, string) {
		mu.Lock()
		n := len(conns)
		mu.Unlock()
		return n == 3, fmt.Sprintf("%d connections", n)
	})
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent enqueue: %v", err)
		}
	}
	e.mu.Lock()
	idle := len(e.idle)
	e.mu.Unlock()
	if idle != 2 {
		t.Fatalf("%d idle connections kept, want 2 (the two the concurrent enqueues used)", idle)
	}
}

// -heartbeat-ms and -election-ms set the cluster timings, and a field
// -node-config sets explicitly wins over them.
func TestTimingFlagsMergeUnderNodeConfig(t *testing.T) {
	got := timingYAML(200, 300, "cluster:\n  election_timeout: 400ms\nstore_forward:\n  batch_max_messages: 8\n")
	for _, want := range []string{"heartbeat_timeout: 200ms", "leader_lease_timeout: 100ms", "election_timeout: 400ms", "batch_max_messages: 8"} {
		if !strings.Contains(got, want) {
			t.Errorf("merged YAML lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "300ms") {
		t.Errorf("-node-config's election_timeout should win over -election-ms:\n%s", got)
	}
	if got := timingYAML(0, 0, "api:\n  max_connections_per_address: 9\n"); !strings.Contains(got, "max_connections_per_address: 9") || strings.Contains(got, "cluster") {
		t.Errorf("no timing flags: %q, want -node-config's bound and no cluster block", got)
	}
}

// A floor client (-api http-floor) counts the node's 404 refusal as the
// answer it came for, and anything else, a stored message above all, as
// an error that says so: a floor that stored messages would measure the
// store. Both HTTP clients, net/http's and the lean one.
func TestHTTPFloorExpectsTheRefusal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == floorPath {
			http.Error(w, `{"code":"unknown_target"}`, http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		name          string
		floor, stored enqueuer
	}{
		{"net/http",
			&httpEnqueuer{url: srv.URL + floorPath, wantStatus: http.StatusNotFound, cl: &http.Client{}},
			&httpEnqueuer{url: srv.URL + "/v1/sf/bench", wantStatus: http.StatusNotFound, cl: &http.Client{}}},
		{"conn",
			&connEnqueuer{addr: addr, path: floorPath, wantStatus: http.StatusNotFound},
			&connEnqueuer{addr: addr, path: "/v1/sf/bench", wantStatus: http.StatusNotFound}},
	} {
		if err := c.floor.enqueue(ctx, "f/1", []byte("payload")); err != nil {
			t.Errorf("%s: floor request refused 404: err = %v, want nil", c.name, err)
		}
		err := c.stored.enqueue(ctx, "f/2", []byte("payload"))
		if err == nil || !strings.Contains(err.Error(), "want HTTP 404, got 201") {
			t.Errorf("%s: floor request answered 201: err = %v, want one naming 404 and 201", c.name, err)
		}
	}
}
