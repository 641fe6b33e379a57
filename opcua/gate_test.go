package opcua

import (
	"testing"

	"github.com/scadad/scadad/role"
)

func TestWriteGate(t *testing.T) {
	tests := []struct {
		name   string
		state  role.State
		allow  bool
		reason string
	}{
		{"active on a pair", role.State{Role: role.Active, Voters: 2}, true, ""},
		{"active with unknown voters", role.State{Role: role.Active, Voters: 0}, true, ""},
		{"standby", role.State{Role: role.Standby, Voters: 2}, false, DenySecondary},
		{"standby on single voter config", role.State{Role: role.Standby, Voters: 1}, false, DenySecondary},
		{"witness", role.State{Role: role.Witness, Voters: 3}, false, DenySecondary},
		{"detached on single-voter cluster", role.State{Role: role.Detached, Voters: 1}, true, ""},
		{"detached on a pair", role.State{Role: role.Detached, Voters: 2}, false, DenyDetached},
		{"detached on witness cluster", role.State{Role: role.Detached, Voters: 3}, false, DenyDetached},
		{"detached, voter count unknown", role.State{Role: role.Detached, Voters: 0}, false, DenyRoleUnknown},
		{"garbage role", role.State{Role: role.Role(9), Voters: 1}, false, DenyRoleUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allow, reason := WriteGate(tt.state)
			if allow != tt.allow || reason != tt.reason {
				t.Errorf("WriteGate(%+v) = %v %q, want %v %q", tt.state, allow, reason, tt.allow, tt.reason)
			}
		})
	}
}
