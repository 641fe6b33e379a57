package opcua

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Verdict is one probe of a peer's endpoint.
type Verdict struct {
	Endpoint     string
	Reachable    bool
	ServiceLevel byte
	Err          string
	At           time.Time
}

// LevelReader reads a peer's ServiceLevel; ReadServiceLevel is the real one.
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
}

// ProberConfig configures NewProber.
type ProberConfig struct {
	// Endpoints are the peers' endpoint URLs.
	Endpoints []string
	// Interval between probes (default 2 s).
	Interval time.Duration
	// Client options for the probe connection; Timeout bounds each probe.
	Client ClientOptions
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
	}
	if p.interval <= 0 {
		p.interval = 2 * time.Second
	}
	if p.clock == nil {
		p.clock = realClock{}
	}
	if p.read == nil {
		opts := c.Client
		p.read = func(ctx context.Context, endpoint string) (byte, error) {
			return ReadServiceLevel(ctx, endpoint, opts)
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
		p.mu.Lock()
		prev, had := p.latest[v.Endpoint]
		p.latest[v.Endpoint] = v
		p.mu.Unlock()
		if !had || prev.Reachable != v.Reachable {
			ev := p.log.Info()
			if !v.Reachable {
				ev = p.log.Warn().Str("error", v.Err)
			}
			ev.Str("peer", v.Endpoint).Bool("reachable", v.Reachable).Uint8("service_level", v.ServiceLevel).Msg("opcua peer probe")
		}
		if p.onVerdict != nil {
			p.onVerdict(v)
		}
	}
	return out
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
