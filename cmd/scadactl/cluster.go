package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/api/controlpb"
)

func runStatus(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	pos, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("status takes no arguments")
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := c.Status(ctx, &controlpb.StatusRequest{})
	if err != nil {
		return rpcErr("status", err)
	}
	// On a node that is not the leader, how far it trails the leader: a
	// Standby that stopped applying (a full disk) still answers, and its
	// own indexes alone do not say it is behind. Tables only: the JSON
	// is the node's own status message.
	leader := ""
	if g.output == "table" && st.RaftState != "Leader" {
		leader = "unknown (no leader known)"
		if st.LeaderApiAddr != "" {
			lead, err := g.leaderStatus(ctx, st.LeaderApiAddr)
			leader = leaderLag(st, lead, err)
		}
	}
	return g.printOut(st, func(w *tabwriter.Writer) {
		contact := "unknown"
		if st.LastContactMs >= 0 {
			contact = (time.Duration(st.LastContactMs) * time.Millisecond).String()
		}
		fmt.Fprintf(w, "node\t%s\n", st.NodeId)
		fmt.Fprintf(w, "role\t%s\n", st.Role)
		fmt.Fprintf(w, "mode\t%s\n", st.Mode)
		fmt.Fprintf(w, "leader\t%s\n", orDash(st.LeaderId))
		fmt.Fprintf(w, "epoch\t%d.%d (cluster epoch %d: raised by an override or a heal; raft term %d: raised by every election)\n", st.ClusterEpoch, st.Term, st.ClusterEpoch, st.Term)
		fmt.Fprintf(w, "voters\t%d\n", st.Voters)
		fmt.Fprintf(w, "commit/applied\t%d/%d\n", st.CommitIndex, st.AppliedIndex)
		if leader != "" {
			fmt.Fprintf(w, "leader commit\t%s\n", leader)
		}
		fmt.Fprintf(w, "last contact\t%s\n", contact)
		fmt.Fprintf(w, "deploy revision\t%d\n", st.DeployRevision)
		fmt.Fprintf(w, "version\t%s\n", orDash(st.Version))
		if st.ClusterFeatureLevel != 0 {
			fmt.Fprintf(w, "FSM feature level\t%d on this node, %d in the cluster (lowest: %s)\n", st.FeatureLevel, st.ClusterFeatureLevel, st.FeatureLevelLowest)
		}
		if st.ApplyBlocked != "" {
			fmt.Fprintf(w, "APPLY BLOCKED\t%s\n", st.ApplyBlocked)
		}
		if st.CertNotAfterUnix != 0 || st.CaNotAfterUnix != 0 {
			fmt.Fprintf(w, "certificates\t%s\n", certificates(st.CertNotAfterUnix, st.CaNotAfterUnix, time.Now()))
		}
		if st.OverrideState != "" {
			fmt.Fprintf(w, "override\t%s\n", st.OverrideState)
		}
		now := time.Now()
		fmt.Fprintf(w, "\nMEMBER\tRAFT\tAPI\tSUFFRAGE\tLEADER\tWITNESS\tREACHABLE\tLAST CONTACT\tVERSION\tFSM LEVEL\n")
		for _, m := range st.Members {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%v\t%s\t%s\t%s\t%s\n", m.Id, m.RaftAddr, orDash(m.ApiAddr), orDash(m.Suffrage), m.Leader, m.Witness,
				reachability(m, st.NodeId, now), lastContact(m, st.NodeId, now), memberVersion(m.Version), levelText(m.FeatureLevel))
		}
		if len(st.Connections) > 0 {
			fmt.Fprintf(w, "\nCONNECTION\tKIND\tENDPOINT\tUP\tDETAIL\n")
			for _, c := range st.Connections {
				fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\n", c.Name, c.Kind, orDash(c.Endpoint), c.Up, c.Detail)
			}
		}
	})
}

// reachability says whether the answering node reaches member m and
// since when: "yes" for the answering node itself (self, or a member with
// no since time that counts as reachable), "yes since 12:01:02 (3m0s)",
// "NO since 12:01:02 (45s)" for a member that stopped answering probes.
func reachability(m *controlpb.MemberStatus, self string, now time.Time) string {
	if m.Id == self || (m.Reachable && m.ReachableSinceUnixNano == 0) {
		return "yes (this node)"
	}
	word := "NO"
	if m.Reachable {
		word = "yes"
	}
	if m.ReachableSinceUnixNano == 0 {
		return word
	}
	since := time.Unix(0, m.ReachableSinceUnixNano)
	return fmt.Sprintf("%s since %s (%s)", word, since.Local().Format("15:04:05"), now.Sub(since).Round(time.Second))
}

// lastContact is how long ago the answering node last heard from m.
func lastContact(m *controlpb.MemberStatus, self string, now time.Time) string {
	if m.Id == self || m.LastContactUnixNano == 0 {
		return "-"
	}
	return now.Sub(time.Unix(0, m.LastContactUnixNano)).Round(time.Millisecond).String() + " ago"
}

// memberVersion shows the release a member recorded; none means it runs a
// release before v0.2.0 (or has not recorded yet).
func memberVersion(v string) string {
	if v == "" {
		return "unrecorded"
	}
	return v
}

// certificates says until when the node's certificate and the site CA
// are valid, loudly once one is within 30 days of its end.
func certificates(certUnix, caUnix int64, now time.Time) string {
	one := func(what string, unix int64) string {
		if unix == 0 {
			return what + " unknown"
		}
		until := time.Unix(unix, 0).UTC()
		left := until.Sub(now)
		days := int(left.Hours() / 24)
		switch {
		case left <= 0:
			return fmt.Sprintf("%s EXPIRED %s", what, until.Format("2006-01-02"))
		case left <= 30*24*time.Hour:
			return fmt.Sprintf("%s until %s (EXPIRES IN %d DAYS: see docs/operations.md, Renewing certificates)", what, until.Format("2006-01-02"), days)
		default:
			return fmt.Sprintf("%s until %s (%d days)", what, until.Format("2006-01-02"), days)
		}
	}
	return one("node", certUnix) + ", " + one("site CA", caUnix)
}

// leaderLag describes the leader's commit index (lead, or the error
// asking for it) against st's applied index.
func leaderLag(st, lead *controlpb.StatusResponse, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("unknown (leader %s: %v)", st.LeaderApiAddr, err)
	case lead.CommitIndex <= st.AppliedIndex:
		return fmt.Sprintf("%d (this node has applied all of it)", lead.CommitIndex)
	default:
		return fmt.Sprintf("%d (this node is %d entries behind)", lead.CommitIndex, lead.CommitIndex-st.AppliedIndex)
	}
}

func runMembers(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("members list | add ID RAFT_ADDR [--nonvoter] | remove ID")
	}
	sub := args[0]
	fs := flag.NewFlagSet("members "+sub, flag.ContinueOnError)
	nonvoter := new(bool)
	if sub == "add" {
		fs.BoolVar(nonvoter, "nonvoter", false, "add as a non-voting member")
	}
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if sub == "remove" {
		if len(pos) != 1 {
			return usagef("members remove ID")
		}
		// Asked before any node is: removing a voter changes the quorum.
		if err := g.confirm(fmt.Sprintf("Remove %s from the cluster? It stops voting and receiving the state until it is added back.", pos[0])); err != nil {
			return err
		}
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	switch sub {
	case "list":
		resp, err := c.Members(ctx, &controlpb.MembersRequest{})
		if err != nil {
			return rpcErr("members list", err)
		}
		return g.printOut(resp.Members, func(w *tabwriter.Writer) {
			now := time.Now()
			fmt.Fprintf(w, "ID\tRAFT\tAPI\tSUFFRAGE\tLEADER\tWITNESS\tCONFIGURED\tIN RAFT\tREACHABLE\tLAST CONTACT\n")
			for _, m := range resp.Members {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%v\t%v\t%v\t%s\t%s\n", m.Id, m.RaftAddr, orDash(m.ApiAddr), orDash(m.Suffrage), m.Leader, m.Witness, m.Configured, m.InRaft,
					reachability(m, "", now), lastContact(m, "", now))
			}
		})
	case "add":
		if len(pos) != 2 {
			return usagef("members add ID RAFT_ADDR [--nonvoter]")
		}
		if _, err := c.AddMember(ctx, &controlpb.AddMemberRequest{Id: pos[0], RaftAddr: pos[1], Nonvoter: *nonvoter}); err != nil {
			return rpcErr("members add", err)
		}
		return g.printOut(map[string]any{"added": pos[0], "raft_addr": pos[1], "nonvoter": *nonvoter}, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "added %s at %s\n", pos[0], pos[1])
		})
	case "remove":
		if _, err := c.RemoveMember(ctx, &controlpb.RemoveMemberRequest{Id: pos[0]}); err != nil {
			return rpcErr("members remove", err)
		}
		return g.printOut(map[string]any{"removed": pos[0]}, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "removed %s\n", pos[0])
		})
	default:
		return usagef("members: unknown subcommand %q (list, add, remove)", sub)
	}
}

func runFailover(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	to := fs.String("to", "", "node to hand the Active role to (default: any voter)")
	pos, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("failover [--to NODE]")
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := c.Failover(ctx, &controlpb.FailoverRequest{To: *to})
	if err != nil {
		return rpcErr("failover", err)
	}
	return g.printOut(resp, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "Active moved from %s to %s\n", resp.OldLeader, resp.NewLeader)
	})
}

func runOverride(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("override", flag.ContinueOnError)
	force := fs.Bool("force", false, "override even though the peer seems to answer (risks two Active nodes)")
	pos, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("override [--force] [--yes]")
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := c.Status(ctx, &controlpb.StatusRequest{})
	if err != nil {
		return rpcErr("status", err)
	}
	q := fmt.Sprintf("Make %s the sole voter of its cluster and Active? Its peer will have to rejoin as Standby.", st.NodeId)
	if *force {
		q += " --force: this can leave two Active nodes if the peer is alive."
	}
	if err := g.confirm(q); err != nil {
		return err
	}
	resp, err := c.Override(ctx, &controlpb.OverrideRequest{Force: *force})
	if err != nil {
		return rpcErr("override", err)
	}
	return g.printOut(resp, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "%s is sole voter, cluster epoch %d\n", st.NodeId, resp.ClusterEpoch)
	})
}

func runAudit(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	after := fs.Uint64("after", 0, "show entries after this sequence number")
	limit := fs.Int("limit", 100, "at most this many entries")
	if _, err := g.parseFlags(fs, args); err != nil {
		return err
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := c.Audit(ctx, &controlpb.AuditRequest{AfterSeq: *after, Limit: int32(*limit)})
	if err != nil {
		return rpcErr("audit", err)
	}
	return g.printOut(resp.Entries, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "SEQ\tTIME\tKIND\tACTOR\tDETAIL\n")
		for _, e := range resp.Entries {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", e.Seq, time.Unix(0, e.TimeUnixNano).UTC().Format(time.RFC3339), e.Kind, orDash(e.Actor), e.Detail)
		}
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a receiver's answer (which may span lines) in its table
// row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
