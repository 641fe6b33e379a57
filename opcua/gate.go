package opcua

import (
	"github.com/scadad/scadad/activegate"
	"github.com/scadad/scadad/role"
)

// Deny reasons, the label values of the write-denial counter (the gate's).
const (
	DenySecondary   = activegate.ReasonSecondary
	DenyDetached    = activegate.ReasonDetached
	DenyRoleUnknown = activegate.ReasonRoleUnknown
)

// WriteGate decides whether a client write may reach the gateway. It returns
// the empty reason when the write is allowed. It is activegate.Decide, the
// one policy of every Active-only surface.
func WriteGate(s role.State) (allow bool, reason string) { return activegate.Decide(s) }
