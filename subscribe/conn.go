package subscribe

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway"
)

// Sink receives tag values and qualities. The OPC UA server and history
// forwarding implement it. It is called from several goroutines at once.
type Sink interface {
	TagUpdate(instance, attribute string, v field.Value, q field.Quality, ts time.Time)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(instance, attribute string, v field.Value, q field.Quality, ts time.Time)

// TagUpdate implements Sink.
func (f SinkFunc) TagUpdate(instance, attribute string, v field.Value, q field.Quality, ts time.Time) {
	f(instance, attribute, v, q, ts)
}

// TagWriter writes one tag; *gateway.Client implements it (the fencing
// epoch travels in ctx, see gateway.WithEpoch).
type TagWriter interface {
	Write(ctx context.Context, tag string, v field.Value) error
}

// TagConn is what the workers need from a gateway connection;
// *gateway.Client implements it.
type TagConn interface {
	SubscribeTags(ctx context.Context, tags []string) ([]gateway.ItemResult, error)
	RemoveItems(ctx context.Context, handles []int32) error
}

// Conn is a connection the manager runs: Run keeps it connected until ctx
// ends, reporting to the gateway.Handler it was dialled with.
type Conn interface {
	TagConn
	Run(ctx context.Context) error
	Close() error
}

// Dialer makes connections.
type Dialer interface {
	Dial(cfg ConnectionConfig, events gateway.Handler) (Conn, error)
}

// GatewayDialer dials real gateways with package gateway's client.
type GatewayDialer struct {
	Metrics *gateway.Metrics
	Logger  zerolog.Logger
}

// Dial implements Dialer.
func (d GatewayDialer) Dial(cfg ConnectionConfig, events gateway.Handler) (Conn, error) {
	c, err := gateway.New(gateway.Config{
		Name: cfg.Name, Endpoint: cfg.Endpoint,
		CommandTimeout: cfg.Options.CommandTimeout, WriteUserID: cfg.Options.WriteUserID,
		ProbeInterval: cfg.Options.ProbeInterval, ProbeTimeout: cfg.Options.ProbeTimeout, LegacySubscribe: cfg.Options.LegacySubscribe,
		Handler: events, Metrics: d.Metrics, Logger: d.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("dial connection %q: %w", cfg.Name, err)
	}
	return c, nil
}

// coalescer gives a connection one subscribe lane: while a gateway call is
// out, requests from other instances queue and then share the next call.
// Tags are not de-duplicated across requests: each instance owns its items.
type coalescer struct {
	conn    TagConn
	name    string
	timeout time.Duration
	metrics *Metrics
	log     zerolog.Logger

	mu      sync.Mutex
	queue   []*subReq
	running bool
}

type subReq struct {
	ctx context.Context
	// life ends when the requester's worker stops for good; the call is
	// cancelled once every requester's life has ended.
	life context.Context
	tags []string
	// apply records the results; it runs even when the requester has gone
	// (a superseded attempt's items are still real), and says whether
	// anybody claimed them and whether the attempt counts as failed.
	apply func([]gateway.ItemResult) (claimed bool, err error)
	done  chan subResult
}

type subResult struct {
	items []gateway.ItemResult
	err   error
}

func (c *coalescer) subscribe(ctx, life context.Context, tags []string, apply func([]gateway.ItemResult) (bool, error)) ([]gateway.ItemResult, error) {
	if life == nil {
		life = context.Background()
	}
	r := &subReq{ctx: ctx, life: life, tags: tags, apply: apply, done: make(chan subResult, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go c.loop()
	}
	select {
	case res := <-r.done:
		return res.items, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *coalescer) loop() {
	for {
		c.mu.Lock()
		var batch []*subReq
		for _, r := range c.queue {
			if r.ctx.Err() == nil && r.life.Err() == nil {
				batch = append(batch, r)
			}
		}
		c.queue = nil
		if len(batch) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.call(batch)
	}
}

// call sends one gateway subscribe for the whole batch. A requester whose
// attempt is superseded does not cancel the call: cancelling would not stop
// the gateway's apartment from running it, only hide its items from us, and
// a slow legacy fan-out that is presumed lost still makes progress this way
// (its advised items are recorded, the next attempt asks for the rest). The
// call is bounded by the in-flight ceiling instead, so a lost reply frees
// the lane when the workers presume it lost. Items nobody claims (their
// worker stopped, or the session was reset) are removed again.
func (c *coalescer) call(batch []*subReq) {
	var tags []string
	for _, r := range batch {
		tags = append(tags, r.tags...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// A call whose requesters have all stopped for good is pure waste: for
	// the legacy fan-out, cancelling it spares the advises not yet sent.
	var live atomic.Int64
	live.Store(int64(len(batch)))
	for _, r := range batch {
		stop := context.AfterFunc(r.life, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	if c.metrics != nil {
		if len(batch) > 1 {
			c.metrics.coalesced.WithLabelValues(c.name).Add(float64(len(batch) - 1))
		}
		c.metrics.gatewayCalls.WithLabelValues(c.name).Inc()
	}
	if len(batch) > 1 {
		c.log.Info().Int("requests", len(batch)).Int("tags", len(tags)).Msg("coalesced concurrent subscribes into one gateway call")
	}
	items, err := c.conn.SubscribeTags(ctx, tags)
	if err == nil && len(items) != len(tags) {
		err = fmt.Errorf("subscribe %d tags: got %d results", len(tags), len(items))
	}
	if c.metrics != nil {
		c.metrics.gatewayCalls.WithLabelValues(c.name).Dec()
	}
	var orphans []int32
	off := 0
	for _, r := range batch {
		n := len(r.tags)
		if err != nil {
			r.done <- subResult{err: err}
			continue
		}
		mine := items[off : off+n]
		off += n
		claimed, aerr := true, error(nil)
		if r.apply != nil {
			claimed, aerr = r.apply(mine)
		}
		if !claimed {
			for _, it := range mine {
				if it.Err == nil {
					orphans = append(orphans, it.Handle)
				}
			}
		}
		r.done <- subResult{items: mine, err: aerr}
	}
	c.removeOrphans(orphans)
}

// removeOrphans removes items whose subscriber is gone.
func (c *coalescer) removeOrphans(handles []int32) {
	if len(handles) == 0 {
		return
	}
	rctx, rcancel := context.WithTimeout(context.Background(), c.timeout)
	defer rcancel()
	if err := c.conn.RemoveItems(rctx, handles); err != nil {
		c.log.Debug().Err(err).Int("items", len(handles)).Msg("remove items of a superseded subscribe")
	}
}
