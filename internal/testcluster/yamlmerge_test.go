//go:build unix

package testcluster

import (
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/nodeconfig"
)

// An Extra that sets one field of the cluster block the cluster writes must
// give a config the node accepts, with that field set and the generated
// members kept.
func TestExtraMergesIntoGeneratedBlocks(t *testing.T) {
	c, err := New(&Binaries{}, Options{Mode: "witness", Voters: 2, Witness: true, Dir: t.TempDir(),
		Extra: "cluster:\n  heartbeat_timeout: 200ms\n  election_timeout: 300ms\n  leader_lease_timeout: 100ms\nstore_forward:\n  batch_max_messages: 64\n"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		cfg, err := nodeconfig.Load(n.Config)
		if err != nil {
			t.Fatalf("%s: %v", n.ID, err)
		}
		if got := cfg.Cluster.HeartbeatTimeout.D(); got != 200*time.Millisecond {
			t.Errorf("%s: heartbeat_timeout %s, want 200ms", n.ID, got)
		}
		if got := cfg.Cluster.ElectionTimeout.D(); got != 300*time.Millisecond {
			t.Errorf("%s: election_timeout %s, want 300ms", n.ID, got)
		}
		if got := len(cfg.Cluster.Members); got != 3 {
			t.Errorf("%s: %d members, want the 3 generated", n.ID, got)
		}
		if got := cfg.SF.BatchMaxMessages; got != 64 {
			t.Errorf("%s: batch_max_messages %d, want 64", n.ID, got)
		}
	}
}

func TestExtraThatIsNotAMappingIsRefused(t *testing.T) {
	_, err := New(&Binaries{}, Options{Mode: "witness", Voters: 2, Witness: true, Dir: t.TempDir(), Extra: "cluster: 5\n"})
	if err == nil || !strings.Contains(err.Error(), "cluster is a block of fields") {
		t.Fatalf("err %v, want one naming cluster as a block", err)
	}
}
