package main

import (
	"context"

	"github.com/scadad/scadad/console"
	"github.com/scadad/scadad/control"
	"github.com/scadad/scadad/pki"
)

// newConsole wires the status page to this node's control server, its
// peers' control APIs and the replicated audit trail.
func (d *daemon) newConsole(srv *control.Server) *console.Console {
	cfg, fwd := d.cfg, d.fwd
	var members []console.Member
	for _, m := range cfg.Cluster.Members {
		members = append(members, console.Member{ID: m.ID, APIAddr: m.APIAddr, Witness: m.Witness})
	}
	// A TLS listener asks the client certificate's role; a plain-HTTP
	// lab listener has none to ask, so only this machine may act.
	authorize := console.CertificateRoles
	switch {
	case cfg.HTTP.Insecure:
		authorize = console.LoopbackOperators
	case cfg.HTTP.ConsoleLoopbackOperators:
		authorize = console.CertificateOrLoopback
	}
	if cfg.HTTP.ConsoleReadOnly {
		authorize = console.AtMostViewer(authorize)
	}
	return console.New(console.Options{
		NodeID:  cfg.NodeID,
		Members: members,
		Local:   srv,
		Peer: func(id string) (console.StatusClient, error) {
			return fwd.Client(id)
		},
		Acting: func(ctx context.Context, who string) context.Context {
			return control.WithCaller(ctx, control.Caller{Name: who, Role: pki.RoleOperator})
		},
		Audit:     d.state,
		Alarms:    d.state,
		Authorize: authorize,
		Log:       d.log.With().Str("part", "console").Logger(),
	})
}
