package activegate

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scadad/scadad/role"
)

// The gated surfaces, the counter's surface label.
const (
	SurfaceWrite     = "write"
	SurfaceAck       = "ack"
	SurfaceAlarmEmit = "alarm-emit"
)

// Deny reasons, the counter's reason label.
const (
	ReasonSecondary   = "secondary"
	ReasonDetached    = "detached"
	ReasonRoleUnknown = "role-unknown"
)

// Decide says whether a node in state s may act on a gated surface; the
// reason is empty when it may.
//
// Only the Active node acts. A Standby or Witness is a secondary. A
// Detached node may act only when the latest configuration says it is the
// cluster's single voter: on a multi-voter cluster an Active peer may
// exist, and when the voter count is unknown (0) the node cannot prove it
// does not, so both default-deny (the seeds' fix for the dual-primary boot
// window).
func Decide(s role.State) (allow bool, reason string) {
	switch s.Role {
	case role.Active:
		return true, ""
	case role.Standby, role.Witness:
		return false, ReasonSecondary
	case role.Detached:
		switch {
		case s.Voters == 1:
			return true, ""
		case s.Voters >= 2:
			return false, ReasonDetached
		default:
			return false, ReasonRoleUnknown
		}
	default:
		return false, ReasonRoleUnknown
	}
}

// Counter counts denials. A nil *Counter counts nothing.
type Counter struct {
	denied *prometheus.CounterVec
}

// NewCounter registers scadad_gate_denied_total on reg, every surface and
// reason present from the start at 0 (so a rate can be alerted on).
func NewCounter(reg prometheus.Registerer) (*Counter, error) {
	c := &Counter{denied: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "scadad_gate_denied_total",
		Help: "Operations the Active-only gate refused, by surface (write, ack, alarm-emit) and reason (secondary, detached, role-unknown).",
	}, []string{"surface", "reason"})}
	if err := reg.Register(c.denied); err != nil {
		return nil, fmt.Errorf("register gate counter: %w", err)
	}
	for _, s := range []string{SurfaceWrite, SurfaceAck, SurfaceAlarmEmit} {
		for _, r := range []string{ReasonSecondary, ReasonDetached, ReasonRoleUnknown} {
			c.denied.WithLabelValues(s, r)
		}
	}
	return c, nil
}

// Denied counts one refusal.
func (c *Counter) Denied(surface, reason string) {
	if c == nil {
		return
	}
	c.denied.WithLabelValues(surface, reason).Add(1)
}

// DeniedN counts n refusals at once.
func (c *Counter) DeniedN(surface, reason string, n int) {
	if c == nil || n <= 0 {
		return
	}
	c.denied.WithLabelValues(surface, reason).Add(float64(n))
}
