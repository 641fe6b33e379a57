package integration

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/control"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// leaderEntries are the leader.elected entries of n's audit trail.
func leaderEntries(t *testing.T, c *testcluster.Cluster, n *testcluster.Node) []*controlpb.AuditEntry {
	t.Helper()
	var audit []*controlpb.AuditEntry
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.CtlJSON(ctx, []*testcluster.Node{n}, &audit, "audit", "--limit", "1000"); err != nil {
		return nil
	}
	var out []*controlpb.AuditEntry
	for _, e := range audit {
		if e.Kind == control.KindLeaderElected {
			out = append(out, e)
		}
	}
	return out
}

// A crash failover shows in the audit trail as an operator's failover
// does: the new leader, its term, the one before it and why; and status
// and members list say the dead member does not answer, and since when.
func TestCrashFailoverIsAuditedAndTheDeadMemberShownUnreachable(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true})
	start(t, c)
	first := waitOneActive(t, c, 20*time.Second)
	var firstEntry *controlpb.AuditEntry
	testwait.For(t, 10*time.Second, "leader.elected of the first Active", func() bool {
		es := leaderEntries(t, c, first)
		if len(es) > 0 && es[len(es)-1].Actor == first.ID {
			firstEntry = es[len(es)-1]
			return true
		}
		return false
	})
	if le, ok := control.ParseLeaderElected(firstEntry.Detail); !ok || le.Term != status(t, c, first).Term {
		t.Fatalf("first leader.elected %q does not name the current term %d", firstEntry.Detail, status(t, c, first).Term)
	}

	// An operator's failover is recorded as planned.
	planned := otherVoter(t, c, first)
	var fo controlpb.FailoverResponse
	ctlJSON(t, c, nil, &fo, "failover", "--to", planned.ID)
	var le control.LeaderElected
	testwait.For(t, 10*time.Second, "leader.elected of the planned failover", func() bool {
		es := leaderEntries(t, c, planned)
		if len(es) == 0 || es[len(es)-1].Actor != planned.ID {
			return false
		}
		le, _ = control.ParseLeaderElected(es[len(es)-1].Detail)
		return true
	})
	if le.Previous != first.ID || le.Cause != control.CausePlanned {
		t.Fatalf("after the failover: %+v, want previous %s, cause %q", le, first.ID, control.CausePlanned)
	}

	// SIGKILL of the Active: the survivor's entry says lost contact.
	dead := planned
	c.Kill(dead)
	survivor := waitOneActive(t, c, 10*time.Second)
	testwait.For(t, 10*time.Second, "leader.elected of the crash failover", func() bool {
		es := leaderEntries(t, c, survivor)
		if len(es) == 0 || es[len(es)-1].Actor != survivor.ID {
			return false
		}
		le, _ = control.ParseLeaderElected(es[len(es)-1].Detail)
		return true
	})
	if le.Previous != dead.ID || le.Cause != control.CauseLostContact || le.Term != status(t, c, survivor).Term {
		t.Fatalf("after SIGKILL of %s: %+v, want previous %s, cause %q, term %d", dead.ID, le, dead.ID, control.CauseLostContact, status(t, c, survivor).Term)
	}

	// status and members list on the survivor: the dead node does not
	// answer, since about when it was killed.
	deadRow := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(dead.ID) + `\s.*\sNO since \d\d:\d\d:\d\d \(\d+s\)`)
	for _, args := range [][]string{{"status"}, {"members", "list"}} {
		var out string
		testwait.For(t, 10*time.Second, "the dead member shown unreachable by "+args[0], func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			o, _, code, err := c.Ctl(ctx, []*testcluster.Node{survivor}, append([]string{"--output", "table"}, args...)...)
			out = o
			return err == nil && code == 0 && deadRow.MatchString(o)
		})
		if !regexp.MustCompile(`(?m)^witness\s.*\syes since `).MatchString(out) {
			t.Fatalf("scadactl %v on %s does not show the witness reachable:\n%s", args, survivor.ID, out)
		}
	}
	var members controlpb.MembersResponse
	ctlJSON(t, c, []*testcluster.Node{survivor}, &members.Members, "members", "list")
	for _, m := range members.Members {
		if m.Id == dead.ID && (m.Reachable || m.ReachableSinceUnixNano == 0 || m.LastContactUnixNano == 0) {
			t.Fatalf("members list JSON for the dead node: %+v, want unreachable with since and last contact times", m)
		}
	}
}
