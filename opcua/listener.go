package opcua

import (
	"math/rand/v2"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/netguard"
)

// guardListener bounds the OPC UA port's connections (Config's
// MaxConnections, MaxConnectionsPerAddress) and retries an accept that
// failed for a passing reason (out of descriptors), as every scadad
// listener does: a client holding many connections cannot take them all,
// and EMFILE does not end the server.
func (s *Server) guardListener(ln net.Listener) net.Listener {
	limits := netguard.Limits{MaxConns: s.cfg.MaxConnections, MaxConnsPerAddr: s.cfg.MaxConnectionsPerAddress}
	events := netguard.Events{
		Refused: func(reason string) {
			if s.metrics != nil {
				s.metrics.refused.WithLabelValues(reason).Inc()
			}
			s.warnOnce("connections:"+reason, func(e *zerolog.Event) *zerolog.Event {
				return e.Str("reason", reason).Int("max_connections", limits.MaxConns).Int("max_connections_per_address", limits.MaxConnsPerAddr)
			}, "OPC UA connection refused: over the connection bound")
		},
		AcceptError: func(err error, delay time.Duration) {
			s.warnOnce("accept", func(e *zerolog.Event) *zerolog.Event {
				return e.Err(err).Dur("retry_in", delay)
			}, "OPC UA accept failed for a passing reason; retrying")
		},
	}
	return netguard.Wrap(ln, limits, events, rand.Float64)
}
