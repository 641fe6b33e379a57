package role

import (
	"fmt"
	"sync"
)

// Role is what a node does in the cluster right now.
type Role int

const (
	// Detached means no cluster contact, or not known yet. Side effects that
	// need the Active role must not run.
	Detached Role = iota
	// Standby is a healthy follower that is a voter and could become Active.
	Standby
	// Witness is the tiny third voter: it runs the FSM but no workload.
	Witness
	// Active is the Raft leader and a voter: it alone drains the
	// store-and-forward buffer, talks to the gateway and accepts writes.
	Active
)

// ReadsField reports whether a node in role r keeps its field sessions
// open (gateway subscriptions, OPC UA client sessions): the Active always,
// the Standby too in hot-standby mode so it takes over with live values.
func (r Role) ReadsField(hotStandby bool) bool {
	return r == Active || (hotStandby && r == Standby)
}

func (r Role) String() string {
	switch r {
	case Detached:
		return "detached"
	case Standby:
		return "standby"
	case Witness:
		return "witness"
	case Active:
		return "active"
	default:
		return fmt.Sprintf("role(%d)", int(r))
	}
}

// Epoch fences side effects: a delivery or gateway write stamped with an
// older epoch than the newest one a receiver has seen comes from a node that
// lost the Active role. Epochs order first by cluster epoch (bumped by every
// availability override) and then by Raft term.
type Epoch struct {
	Cluster uint64 `json:"cluster"`
	Term    uint64 `json:"term"`
}

// Less reports whether e is older than o.
func (e Epoch) Less(o Epoch) bool {
	if e.Cluster != o.Cluster {
		return e.Cluster < o.Cluster
	}
	return e.Term < o.Term
}

// String renders the epoch as "cluster.term", the form used in headers and logs.
func (e Epoch) String() string { return fmt.Sprintf("%d.%d", e.Cluster, e.Term) }

// State is one published snapshot of a node's role.
type State struct {
	Role   Role   `json:"role"`
	Epoch  Epoch  `json:"epoch"`
	NodeID string `json:"node_id"`
	// Leader is the node id of the current leader, empty when unknown.
	Leader string `json:"leader"`
	// Voters is the number of voters in the latest cluster configuration;
	// 0 when unknown. The OPC UA write gate allows an unknown role only on a
	// single-voter cluster.
	Voters int `json:"voters"`
	// Electing is set on a Detached voter whose raft runs and which is
	// between leaders: a candidate, a follower that lost its leader, or
	// a new leader whose barrier has not committed yet. It does not make
	// the node Active for anything; it tells those that advertise
	// health (OPC UA ServiceLevel) that the node is taking part in an
	// election, not cut off or stopping.
	Electing bool `json:"electing,omitempty"`
	// Unconfirmed marks the Detached state of a raft leader whose last
	// quorum confirmation is late (raftnode's Acting view turns Active
	// into it): side effects outside the cluster wait, but the node
	// still leads, and work that commits through raft, which needs the
	// quorum anyway, may go on (Leading).
	Unconfirmed bool `json:"unconfirmed,omitempty"`
}

// Leading reports whether the node leads the cluster as far as it knows:
// Active, or Active with its quorum confirmation late. Parts whose work
// only ever commits through raft (tag and alarm history enqueues) follow
// it, so a confirmation that is late for a moment, which publishes no role
// change and so replays nothing afterwards, does not drop what arrives in
// that moment. Side effects outside the cluster follow Role == Active.
func (s State) Leading() bool { return s.Role == Active || s.Unconfirmed }

// Broadcaster hands the newest State to every watcher. Watchers that fall
// behind skip intermediate states: a role consumer only ever needs the latest.
type Broadcaster struct {
	mu       sync.Mutex
	current  State
	watchers map[chan State]struct{}
}

// NewBroadcaster returns a Broadcaster whose current state is initial.
func NewBroadcaster(initial State) *Broadcaster {
	return &Broadcaster{current: initial, watchers: make(map[chan State]struct{})}
}

// Current returns the newest published state.
func (b *Broadcaster) Current() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.current
}

// Publish makes s the current state and offers it to every watcher.
func (b *Broadcaster) Publish(s State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.current = s
	for ch := range b.watchers {
		select {
		case <-ch: // drop the stale value so the newest one fits
		default:
		}
		ch <- s
	}
}

// Watch returns a channel that receives the current state at once and every
// later one (coalesced), and a function that stops the watch.
func (b *Broadcaster) Watch() (<-chan State, func()) {
	ch := make(chan State, 1)
	b.mu.Lock()
	b.watchers[ch] = struct{}{}
	ch <- b.current
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.watchers, ch)
		b.mu.Unlock()
	}
}

// Source is what role consumers need; *Broadcaster implements it. Consumers
// should declare their own narrower interface where they need less.
type Source interface {
	Current() State
	Watch() (<-chan State, func())
}
