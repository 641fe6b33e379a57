package opcua

import (
	"context"
	"fmt"
	"sync"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/uasec"
)

// Verdict is one probe of a peer's endpoint.
type Verdict struct {
	Endpoint     string
	Reachable    bool
	ServiceLevel byte
	Err          string
	At           time.Time
}

// LevelReader reads a peer's ServiceLevel, or fails when the peer cannot
// be reached; probeEndpoint is the real one.
type LevelReader func(ctx context.Context, endpoint string) (byte, error)

// Prober checks the peers' OPC UA endpoints on a period. The daemon shares
// each verdict over the peer link; the peer feeds it to its
// Server.SetPeerVerdict, so a node its peer cannot reach leaves the healthy
// tiers even when it can reach everything itself.
type Prober struct {
	endpoints []string
	interval  time.Duration
	read      LevelReader
	clock     Clock
	log       zerolog.Logger
	onVerdict func(Verdict)

	mu     sync.Mutex
	latest map[string]Verdict
	// downSince holds peers unreachable since their first probe, not yet
	// warned about: at start the peer is often still starting.
	downSince map[string]time.Time
}

// probeStartGrace is how long a peer unreachable from the first probe on
// is logged at info before it is warned about: the nodes of a site start
// together, and the first probe often comes before the peer listens.
const probeStartGrace = 30 * time.Second

// ProberConfig configures NewProber.
type ProberConfig struct {
	// Endpoints are the peers' endpoint URLs.
	Endpoints []string
	// Interval between probes (default 2 s).
	Interval time.Duration
	// Client options for the probe connection; Timeout bounds each probe.
	Client uasec.ClientOptions
	// Read replaces the real connect-and-read (tests).
	Read LevelReader
	// OnVerdict is called after every probe.
	OnVerdict func(Verdict)
	Clock     Clock
	Logger    zerolog.Logger
}

// NewProber builds a Prober; Run starts it.
func NewProber(c ProberConfig) *Prober {
	p := &Prober{
		endpoints: append([]string(nil), c.Endpoints...),
		interval:  c.Interval,
		read:      c.Read,
		clock:     c.Clock,
		log:       c.Logger.With().Str("component", "opcua-probe").Logger(),
		onVerdict: c.OnVerdict,
		latest:    make(map[string]Verdict),
		downSince: make(map[string]time.Time),
	}
	if p.interval <= 0 {
		p.interval = 2 * time.Second
	}
	if p.clock == nil {
		p.clock = wallClock()
	}
	if p.read == nil {
		opts := c.Client
		p.read = func(ctx context.Context, endpoint string) (byte, error) {
			return probeEndpoint(ctx, endpoint, opts)
		}
	}
	return p
}

// ProbeOnce probes every peer once and returns the verdicts.
func (p *Prober) ProbeOnce(ctx context.Context) []Verdict {
	out := make([]Verdict, len(p.endpoints))
	var wg sync.WaitGroup
	for i, ep := range p.endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lvl, err := p.read(ctx, ep)
			v := Verdict{Endpoint: ep, Reachable: err == nil, ServiceLevel: lvl, At: p.clock.Now()}
			if err != nil {
				v.Err = err.Error()
			}
			out[i] = v
		}()
	}
	wg.Wait()
	for _, v := range out {
		p.logVerdict(v)
		if p.onVerdict != nil {
			p.onVerdict(v)
		}
	}
	return out
}

// logVerdict records v and logs a change of reachability: a peer lost is a
// warning at once, one unreachable since the first probe only once it has
// been for probeStartGrace.
func (p *Prober) logVerdict(v Verdict) {
	p.mu.Lock()
	prev, had := p.latest[v.Endpoint]
	p.latest[v.Endpoint] = v
	since, starting := p.downSince[v.Endpoint]
	switch {
	case v.Reachable:
		delete(p.downSince, v.Endpoint)
	case !had:
		p.downSince[v.Endpoint] = v.At
	case starting && v.At.Sub(since) >= probeStartGrace:
		delete(p.downSince, v.Endpoint)
	}
	p.mu.Unlock()
	switch {
	case v.Reachable && (!had || !prev.Reachable):
		p.log.Info().Str("peer", v.Endpoint).Bool("reachable", true).Uint8("service_level", v.ServiceLevel).Msg("opcua peer probe")
	case !v.Reachable && !had:
		p.log.Info().Str("peer", v.Endpoint).Bool("reachable", false).Str("error", v.Err).
			Msg("opcua peer not reachable yet (it may still be starting)")
	case !v.Reachable && prev.Reachable:
		p.log.Warn().Str("peer", v.Endpoint).Bool("reachable", false).Str("error", v.Err).Msg("opcua peer probe")
	case !v.Reachable && starting && v.At.Sub(since) >= probeStartGrace:
		p.log.Warn().Str("peer", v.Endpoint).Bool("reachable", false).Str("error", v.Err).
			Dur("since", v.At.Sub(since)).Msg("opcua peer unreachable since this node started")
	}
}

// Run probes until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	for {
		p.ProbeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(p.interval):
		}
	}
}

// Latest returns the last verdict about endpoint.
func (p *Prober) Latest(endpoint string) (Verdict, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.latest[endpoint]
	return v, ok
}

// probeEndpoint asks the peer for its endpoints, which proves what the
// probe is for (clients can connect, handshake and be answered), and then
// reads its ServiceLevel when the peer offers a session these options can
// open. A site whose endpoints are all secure needs a trusted certificate
// and perhaps a user for that, which the probe has no business holding:
// there the peer is reachable with level 0 (not read).
func probeEndpoint(ctx context.Context, endpoint string, o uasec.ClientOptions) (byte, error) {
	ctx, cancel := context.WithTimeout(ctx, o.EffectiveTimeout())
	defer cancel()
	eps, err := gopcua.GetEndpoints(ctx, endpoint, gopcua.DialTimeout(o.EffectiveTimeout()), gopcua.RequestTimeout(o.EffectiveTimeout()))
	if err != nil {
		return 0, fmt.Errorf("get endpoints of %s: %w", endpoint, err)
	}
	if !o.CanOpenSession(eps) {
		return 0, nil
	}
	return ReadServiceLevel(ctx, endpoint, o)
}
