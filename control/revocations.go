package control

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/pki"
)

// AccessState is the state the revocation watch reads; *fsm.FSM is one.
type AccessState interface {
	Changes() (<-chan uint64, func())
	Access() *fsm.Access
}

// CloseRevokedConnections closes the tracked connections of every certificate on
// the deny list each time an applied entry changes it: a revoked
// operator's open stream ends within moments of the revocation's commit,
// not at its next handshake only. It returns when ctx ends.
func CloseRevokedConnections(ctx context.Context, state AccessState, conns *pki.Tracker, log zerolog.Logger) {
	changes, stop := state.Changes()
	defer stop()
	var seen *fsm.Access
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
		acc := state.Access()
		if acc == seen {
			continue
		}
		seen = acc
		if n := conns.CloseRevoked(acc.IsRevoked); n > 0 {
			log.Warn().Int("connections", n).Msg("closed the connections of revoked certificates")
		}
	}
}
