package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/siteconfig"
)

func runDeploy(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("deploy push FILE [--expect-revision N] [-m MESSAGE] | rollback [--to REV] | history | diff REV1 REV2 | status")
	}
	sub := args[0]
	// Each subcommand registers only its own flags, so its -h lists what
	// it takes and a flag meant for another (rollback -m) is refused.
	var (
		expect int64 = -1
		msg    string
		to     uint64
	)
	fs := flag.NewFlagSet("deploy "+sub, flag.ContinueOnError)
	switch sub {
	case "push":
		fs.Int64Var(&expect, "expect-revision", -1, "push only if the current revision is N (compare-and-set)")
		fs.StringVar(&msg, "m", "", "why: a message recorded with the revision (deploy history shows it)")
	case "rollback":
		fs.Uint64Var(&to, "to", 0, "the revision to return to (default: the previous one)")
	}
	target := fs.String("target", "site", "deployment target")
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	switch sub {
	case "push":
		if len(pos) != 1 {
			return usagef("deploy push FILE [--expect-revision N] [-m MESSAGE]")
		}
		return deployPush(ctx, g, pos[0], expect, msg, *target)
	case "rollback":
		if len(pos) != 0 {
			return usagef("deploy rollback [--to REV]")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.DeployRollback(ctx, &controlpb.DeployRollbackRequest{ToRevision: to, Target: *target})
		if err != nil {
			return rpcErr("deploy rollback", err)
		}
		return g.printOut(resp, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "rolled back: revision %d now points at %.12s\n", resp.Revision, resp.Sha256)
		})
	case "history":
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.DeployHistory(ctx, &controlpb.DeployHistoryRequest{Target: *target})
		if err != nil {
			return rpcErr("deploy history", err)
		}
		return g.printOut(resp, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "REV\tSHA256\tWHEN\tBY\tROLLBACK OF\tMESSAGE\n")
			for _, r := range resp.Revisions {
				mark := ""
				if r.Revision == resp.Current {
					mark = " *"
				}
				rb := "-"
				if r.RollbackOf != 0 {
					rb = strconv.FormatUint(r.RollbackOf, 10)
				}
				fmt.Fprintf(w, "%d%s\t%.12s\t%s\t%s\t%s\t%s\n", r.Revision, mark, r.Sha256, time.Unix(0, r.TimeUnixNano).UTC().Format(time.RFC3339), orDash(r.Actor), rb, r.Message)
			}
		})
	case "status":
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.DeployStatus(ctx, &controlpb.DeployStatusRequest{Target: *target})
		if err != nil {
			return rpcErr("deploy status", err)
		}
		return g.printOut(resp, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "current revision %d (%.12s)\n\nNODE\tAPPLIED\tRESULT\tWHEN\tREASON\n", resp.Current, resp.Sha256)
			for _, n := range resp.Nodes {
				result := "ok"
				if !n.Ok {
					result = "failed"
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", n.NodeId, n.Revision, result, time.Unix(0, n.TimeUnixNano).UTC().Format(time.RFC3339), orDash(n.Reason))
			}
		})
	case "diff":
		if len(pos) != 2 {
			return usagef("deploy diff REV1 REV2")
		}
		var revs [2]uint64
		for i, p := range pos {
			v, err := strconv.ParseUint(p, 10, 64)
			if err != nil || v == 0 {
				return usagef("deploy diff: %q is not a revision number", p)
			}
			revs[i] = v
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		var sites [2]*siteconfig.Site
		for i, rev := range revs {
			resp, err := c.DeployGet(ctx, &controlpb.DeployGetRequest{Revision: rev, Target: *target})
			if err != nil {
				return rpcErr(fmt.Sprintf("deploy get %d", rev), err)
			}
			s, err := siteconfig.Parse(resp.Artifact)
			if err != nil {
				return fmt.Errorf("deploy diff: revision %d does not parse: %w", rev, err)
			}
			sites[i] = s
		}
		changes := siteconfig.Diff(sites[0], sites[1])
		return g.printOut(changes, func(w *tabwriter.Writer) {
			fmt.Fprint(w, changes.String())
		})
	default:
		return usagef("deploy: unknown subcommand %q (push, rollback, history, diff, status)", sub)
	}
}

func deployPush(ctx context.Context, g *globals, file string, expect int64, msg, target string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("deploy push: %w", err)
	}
	// Validate here first so an operator sees every problem before anything
	// reaches the cluster; the cluster validates again.
	site, err := siteconfig.Parse(data)
	if err != nil {
		return fmt.Errorf("deploy push: %s: %w", file, err)
	}
	if err := site.Validate(); err != nil {
		return fmt.Errorf("deploy push: %s is not a valid site config:\n%w", file, err)
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	req := &controlpb.DeployPushRequest{Artifact: data, Message: msg, Target: target}
	if expect >= 0 {
		req.ExpectRevision, req.HasExpectRevision = uint64(expect), true
	}
	resp, err := c.DeployPush(ctx, req)
	if err != nil {
		return rpcErr("deploy push", err)
	}
	return g.printOut(resp, func(w *tabwriter.Writer) {
		if resp.Noop {
			fmt.Fprintf(w, "no change: revision %d already has this content (%.12s)\n", resp.Revision, resp.Sha256)
			return
		}
		fmt.Fprintf(w, "deployed revision %d (%.12s)\n", resp.Revision, resp.Sha256)
	})
}
