package opcua

import (
	"time"

	"github.com/scadad/scadad/role"
)

// ServiceLevel tiers, after the OtOpcUa redundancy truth table. Clients pick
// the endpoint with the highest level, so the Active node must always win a
// tie-break against a healthy Standby, and any doubt must cost tiers.
const (
	// LevelDown is published by a node that must not be chosen: detached,
	// witness, or shutting down.
	LevelDown byte = 0
	// LevelCritical: no quorum contact and stale data.
	LevelCritical byte = 100
	// LevelDegraded: one of no quorum contact, stale data, or the peer
	// reporting that it cannot reach this node's endpoint.
	LevelDegraded byte = 200
	// LevelStandby is a healthy Standby.
	LevelStandby byte = 240
	// LevelActive is a healthy Active node.
	LevelActive byte = 250
)

// PeerReach is what the peer last reported about reaching this node's
// OPC UA endpoint.
type PeerReach int

const (
	// ReachUnknown: no recent verdict (no peer, or its verdict expired).
	// Unknown gets the benefit of the doubt so a lone node is not demoted.
	ReachUnknown PeerReach = iota
	// ReachOK: the peer connected and read our ServiceLevel recently.
	ReachOK
	// ReachFailed: the peer recently failed to reach our endpoint.
	ReachFailed
)

func (p PeerReach) String() string {
	switch p {
	case ReachOK:
		return "ok"
	case ReachFailed:
		return "failed"
	default:
		return "unknown"
	}
}

// Health is everything the ServiceLevel depends on.
type Health struct {
	Role role.Role
	// QuorumContact is true while the node knows the current leader.
	QuorumContact bool
	// DataFresh is false when the node's tag data is stale (its subscribe
	// feed is down or lagging).
	DataFresh bool
	// PeerReachesMe is the peer's recent verdict about this node's endpoint.
	PeerReachesMe PeerReach
	// ShuttingDown is set once Close begins.
	ShuttingDown bool
	// Electing: a Detached node that was Standby or Active until an
	// election began, not long ago (Config.ElectionGrace). It is still a
	// server clients may move to (it may be the next Active), so it is
	// rated as a Standby without quorum contact, not as detached.
	Electing bool
}

// ComputeServiceLevel maps health to the byte a node publishes. It is pure:
// the same Health always gives the same level.
func ComputeServiceLevel(h Health) byte {
	if h.ShuttingDown {
		return LevelDown
	}
	if h.Role == role.Detached && h.Electing {
		h.Role, h.QuorumContact = role.Standby, false
	}
	if h.Role != role.Active && h.Role != role.Standby {
		return LevelDown
	}
	if !h.QuorumContact && !h.DataFresh {
		return LevelCritical
	}
	if !h.QuorumContact || !h.DataFresh || h.PeerReachesMe == ReachFailed {
		return LevelDegraded
	}
	if h.Role == role.Active {
		return LevelActive
	}
	return LevelStandby
}

// EffectivePeerReach turns a stored verdict into the calculator input: a
// verdict older than ttl no longer counts, because a departed or silent peer
// must not keep this node demoted.
func EffectivePeerReach(ok, known bool, at, now time.Time, ttl time.Duration) PeerReach {
	if !known || now.Sub(at) > ttl {
		return ReachUnknown
	}
	if ok {
		return ReachOK
	}
	return ReachFailed
}
