package opcua

import "github.com/scadad/scadad/role"

// Deny reasons, the label values of the write-denial counter.
const (
	DenySecondary   = "secondary"
	DenyDetached    = "detached"
	DenyRoleUnknown = "role-unknown"
)

// WriteGate decides whether a client write may reach the gateway. It returns
// the empty reason when the write is allowed.
//
// Only the Active node writes. A Standby or Witness is a secondary. A
// Detached node may write only when the latest configuration says it is the
// cluster's single voter: on a multi-voter cluster an Active peer may exist,
// and when the voter count is unknown (0) the node cannot prove it does not,
// so both default-deny (the seeds' fix for the dual-primary boot window).
func WriteGate(s role.State) (allow bool, reason string) {
	switch s.Role {
	case role.Active:
		return true, ""
	case role.Standby, role.Witness:
		return false, DenySecondary
	case role.Detached:
		switch {
		case s.Voters == 1:
			return true, ""
		case s.Voters >= 2:
			return false, DenyDetached
		default:
			return false, DenyRoleUnknown
		}
	default:
		return false, DenyRoleUnknown
	}
}
