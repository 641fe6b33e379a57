package raftnode

import (
	"time"

	"github.com/hashicorp/raft"
)

// verifyInterval is how often a leader proves its leadership with a quorum
// round trip (raft's VerifyLeader: a heartbeat answered by a majority).
const verifyInterval = 50 * time.Millisecond

// verifyLoop keeps leaderVerifiedAt current while this node leads. A leader
// that was frozen (SIGSTOP, a VM stall) wakes up still believing it leads
// until raft notices the newer term; its last verification then is as old
// as the freeze, which is what ActiveFresh looks at.
func (n *Node) verifyLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(verifyInterval)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		r, _ := n.current()
		if r == nil || r.State() != raft.Leader {
			continue
		}
		started := n.cfg.Clock.Now()
		done := make(chan error, 1)
		go func() { done <- r.VerifyLeader().Error() }()
		select {
		case err := <-done:
			if err == nil {
				// Leadership held at some instant after started: started is
				// the conservative stamp.
				n.leaderVerifiedAt.Store(started.UnixNano())
			}
		case <-time.After(time.Second):
			// No quorum answered: leave the stamp to age.
		case <-n.ctx.Done():
			return
		}
	}
}

// ActiveFresh reports whether this node is the leader and a quorum
// confirmed it within window. Side effects that must never run on two nodes
// at once (deliveries, device writes, "I am Active" answers) check it at
// the moment they act, so a leader that just woke from a freeze acts on
// nothing until it has heard from a quorum again — by then it has learnt of
// any newer term and stepped down.
func (n *Node) ActiveFresh(window time.Duration) bool {
	r, _ := n.current()
	if r == nil || r.State() != raft.Leader {
		return false
	}
	at := n.leaderVerifiedAt.Load()
	return at != 0 && n.cfg.Clock.Now().Sub(time.Unix(0, at)) <= window
}
