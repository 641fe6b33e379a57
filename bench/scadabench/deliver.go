//go:build unix

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

type deliverResult struct {
	Messages  int     `json:"messages"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_s"`
}

// deliverPhase fills the buffer while the sink refuses, then times the
// drain. The backlog from the write phases drains too and is counted.
func (b *bench) deliverPhase(n int) (*deliverResult, error) {
	lead, err := b.leader()
	if err != nil {
		return nil, err
	}
	conns := make([]*multi, 32)
	for i := range conns {
		if conns[i], err = b.clientFor([]*testcluster.Node{lead}); err != nil {
			return nil, err
		}
		defer conns[i].Close()
	}
	runLoad(conns, len(conns), 256, 0, n, seqIDs(fmt.Sprintf("d%d", time.Now().UnixNano())), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	total, err := b.pending(ctx)
	if err != nil {
		return nil, err
	}
	// Restart the Active so delivery starts from a fresh backoff: the sink
	// refused the head of the queue and the target now waits 30 s.
	stopReceiver, err := b.startReceiver()
	if err != nil {
		return nil, err
	}
	defer stopReceiver()
	if _, errs, code, err := b.c.Ctl(ctx, nil, "failover"); err != nil || code != 0 {
		return nil, fmt.Errorf("failover to restart delivery: exit %d %s %v", code, errs, err)
	}
	stop := b.profile("deliver", 5*time.Second)
	defer stop()
	t0 := time.Now()
	if err := testwait.Poll(ctx, func() bool {
		p, err := b.pending(ctx)
		return err == nil && p == 0
	}); err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	return &deliverResult{Messages: int(total), Seconds: secs, PerSecond: float64(total) / secs}, nil
}

// startReceiver makes the target's receiver accept again after setup left
// it refusing: the sink answers, the PostgreSQL server or the broker runs.
// The returned func stops the server at the end of the phase.
func (b *bench) startReceiver() (stop func(), err error) {
	if err := b.sink.SetFailing(false); err != nil {
		return nil, fmt.Errorf("let the sink accept: %w", err)
	}
	switch {
	case b.pg != nil:
		if err := b.pg.Start(); err != nil {
			return nil, fmt.Errorf("start the PostgreSQL receiver: %w", err)
		}
		return b.pg.Stop, nil
	case b.mq != nil:
		if err := b.mq.Start(); err != nil {
			return nil, fmt.Errorf("start the MQTT broker: %w", err)
		}
		return b.mq.Stop, nil
	}
	return func() {}, nil
}

// closeReceivers stops the sink and whichever server the deliver phase
// started (a PostgreSQL or Mosquitto left running would outlive the run
// and its data directory).
func (b *bench) closeReceivers() {
	b.sink.Close()
	if b.pg != nil {
		b.pg.Stop()
	}
	if b.mq != nil {
		b.mq.Stop()
	}
}
