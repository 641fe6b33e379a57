package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/netguard"
	"github.com/scadad/scadad/nodeconfig"
)

// descriptorReserve is what the process keeps for everything but its
// listeners' accepted connections: the state and raft files, snapshots,
// logs, outgoing connections to peers, targets and the field gateway.
const descriptorReserve = 256

// listenerBudgets are the connection bounds of the node's listeners, fitted
// into the process's descriptor limit.
type listenerBudgets struct {
	http, api, raft, opcua netguard.Limits
}

func limitsOf(c nodeconfig.ConnLimits) netguard.Limits {
	return netguard.Limits{MaxConns: c.MaxConnections, MaxConnsPerAddr: c.MaxConnectionsPerAddress}
}

// fitListenerBudgets reads the bounds from cfg and scales them down when
// the descriptor limit cannot hold them all beside descriptorReserve, so
// that a flood on one listener runs into its bound, never into EMFILE for
// raft or the state file.
func fitListenerBudgets(cfg *nodeconfig.Config, limit uint64, log zerolog.Logger) listenerBudgets {
	b := listenerBudgets{http: limitsOf(cfg.HTTP.Connections), api: limitsOf(cfg.API.Connections), raft: limitsOf(cfg.Cluster.RaftConnections),
		opcua: limitsOf(cfg.OPCUA.Connections)}
	if cfg.HTTP.Listen == "" {
		b.http = netguard.Limits{}
	}
	if self, _ := cfg.Self(); self.OPCUA == "" {
		b.opcua = netguard.Limits{}
	}
	if netguard.FitDescriptors(limit, descriptorReserve, &b.http, &b.api, &b.raft, &b.opcua) {
		log.Warn().Uint64("descriptor_limit", limit).Int("reserve", descriptorReserve).
			Int("http", b.http.MaxConns).Int("api", b.api.MaxConns).Int("raft", b.raft.MaxConns).Int("opcua", b.opcua.MaxConns).
			Msg("the open-files limit (ulimit -n, systemd LimitNOFILE) cannot hold the configured max_connections; lowered them to fit")
	}
	return b
}

// guardedListen listens on addr within limits, counting into
// scadad_<name>_accept_errors_total, scadad_<name>_connections_refused_total
// and scadad_<name>_connections_open.
func guardedListen(reg prometheus.Registerer, log zerolog.Logger, name, addr string, limits netguard.Limits) (*netguard.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listen %s: %w", name, addr, err)
	}
	errs := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "scadad_" + name + "_accept_errors_total",
		Help: "Accepts on the " + name + " listener that failed for a passing reason (out of file descriptors or memory) and were retried.",
	})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "scadad_" + name + "_connections_refused_total",
		Help: "Connections to the " + name + " listener closed as accepted: over max_connections (total) or max_connections_per_address (per_address).",
	}, []string{"reason"})
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "scadad_" + name + "_connections_open", Help: "Connections the " + name + " listener holds open.",
	})
	for _, r := range []string{netguard.RefusedTotal, netguard.RefusedPerAddr} {
		refused.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{errs, refused, open} {
		if err := reg.Register(c); err != nil {
			l.Close()
			return nil, fmt.Errorf("%s listener metrics: %w", name, err)
		}
	}
	log = log.With().Str("part", name).Logger()
	var lastWarn, lastRefusal atomic.Int64
	everyTenSeconds := func(last *atomic.Int64) bool {
		now := time.Now().UnixNano()
		prev := last.Load()
		return now-prev >= int64(10*time.Second) && last.CompareAndSwap(prev, now)
	}
	return netguard.Wrap(l, limits, netguard.Events{
		AcceptError: func(err error, delay time.Duration) {
			errs.Inc()
			if everyTenSeconds(&lastWarn) {
				log.Warn().Err(err).Dur("retry_in", delay).Msg("accepting a connection failed; the listener keeps trying (at most one such warning per 10 s)")
			}
		},
		Refused: func(reason string) {
			refused.WithLabelValues(reason).Inc()
			if everyTenSeconds(&lastRefusal) {
				log.Warn().Str("bound", reason).Int("max_connections", limits.MaxConns).Int("max_connections_per_address", limits.MaxConnsPerAddr).
					Msg("refused connections over the listener's bound (at most one such warning per 10 s)")
			}
		},
		Open: func(n int) { open.Set(float64(n)) },
	}, rand.Float64), nil
}
