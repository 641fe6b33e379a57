//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
)

type writeResult struct {
	Clients    int     `json:"clients"`
	ValueBytes int     `json:"value_bytes"`
	Target     string  `json:"target"`
	API        string  `json:"api"`
	Seconds    float64 `json:"seconds"`
	Puts       int     `json:"puts"`
	Errors     int64   `json:"errors"`
	PutsPerSec float64 `json:"puts_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// LeaderMoved says the raft term or leader changed between the end of
	// the warm-up and the end of the run (an election under load): the
	// clients then wrote to a node that forwarded to the new leader, or
	// waited out an election, and the rate is not the steady state's.
	LeaderMoved string `json:"leader_moved,omitempty"`
}

func (b *bench) writePhase(clients, size int) (writeResult, error) {
	lead, err := b.leader()
	if err != nil {
		return writeResult{}, err
	}
	nodes := []*testcluster.Node{lead}
	if b.o.target == "all" {
		nodes = nodes[:0]
		for _, n := range b.c.Nodes {
			if !n.Witness {
				nodes = append(nodes, n)
			}
		}
	}
	nconn := b.o.conns
	if nconn <= 0 || nconn > clients {
		nconn = clients
	}
	conns := make([]*multi, nconn)
	for i := range conns {
		if conns[i], err = b.clientFor(nodes); err != nil {
			return writeResult{}, err
		}
		defer conns[i].Close()
	}
	tag := fmt.Sprintf("w%d-%d-%d", clients, size, time.Now().UnixNano())
	if b.o.warmup > 0 {
		runLoad(conns, clients, size, b.o.warmup, 0, b.idMaker(tag+"warm"), nil)
	}
	before, err := b.raftView(lead)
	if err != nil {
		return writeResult{}, err
	}
	stop := b.profile(fmt.Sprintf("write-c%d-v%d", clients, size), b.o.duration)
	r := runLoad(conns, clients, size, b.o.duration, b.o.count, b.idMaker(tag), nil)
	stop()
	after, err := b.raftView(lead)
	if err != nil {
		return writeResult{}, err
	}
	if after != before {
		r.LeaderMoved = fmt.Sprintf("term %d leader %s, then term %d leader %s", before.term, before.leader, after.term, after.leader)
	}
	r.Target, r.API = b.o.target, b.o.api
	if b.o.overHTTP() {
		r.API = b.o.api + "-" + b.o.httpAuth + "-" + b.o.httpClient
	}
	return r, nil
}

// raftTerm is a node's raft term and the leader it knows.
type raftTerm struct {
	term   uint64
	leader string
}

// raftView asks n for its raft term and leader.
func (b *bench) raftView(n *testcluster.Node) (raftTerm, error) {
	c, err := b.client(n)
	if err != nil {
		return raftTerm{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.api.Status(ctx, &controlpb.StatusRequest{})
	if err != nil {
		return raftTerm{}, fmt.Errorf("status of %s: %w", n.ID, err)
	}
	return raftTerm{term: st.Term, leader: st.LeaderId}, nil
}

// idMaker returns how write clients name their messages (-ids): "seq",
// tag/client/n as etcdbench names its keys; "random", 16 random bytes in
// hex (an idempotency key such as a UUID); "server", none, so scadad
// generates one.
func (b *bench) idMaker(tag string) func(client, n int) string {
	switch b.o.ids {
	case "random":
		return func(int, int) string {
			var r [16]byte
			_, _ = rand.Read(r[:])
			return hex.EncodeToString(r[:])
		}
	case "server":
		return func(int, int) string { return "" }
	}
	return seqIDs(tag)
}

func seqIDs(tag string) func(client, n int) string {
	return func(client, n int) string { return fmt.Sprintf("%s/%d/%d", tag, client, n) }
}

// runLoad has clients enqueue size-byte messages over conns for d, or
// count messages in all when count > 0, adding each acknowledged one to
// acked when it is not nil (a phase that watches the rate as it goes).
func runLoad(conns []*multi, clients, size int, d time.Duration, count int, newID func(client, n int) string, acked *atomic.Int64) writeResult {
	val := make([]byte, size)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	lat := make([][]time.Duration, clients)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range clients {
		quota := count / clients
		if i < count%clients {
			quota++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := conns[i%len(conns)]
			for n := 0; ; n++ {
				if count > 0 && n >= quota || count <= 0 && time.Now().After(deadline) {
					return
				}
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := cli.enqueue(ctx, newID(i, n), val)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				lat[i] = append(lat[i], time.Since(t0))
				if acked != nil {
					acked.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	all := slices.Concat(lat...)
	slices.Sort(all)
	return writeResult{Clients: clients, ValueBytes: size, Seconds: secs, Puts: len(all), Errors: errs.Load(),
		PutsPerSec: float64(len(all)) / secs, P50Ms: pct(all, 0.50), P99Ms: pct(all, 0.99), MaxMs: pct(all, 1)}
}

// pct is the nearest-rank percentile of sorted durations, in milliseconds.
func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := max(int(math.Ceil(q*float64(len(sorted))))-1, 0)
	return float64(sorted[i].Microseconds()) / 1000
}
