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

// runCheck shows the cross-node state checkpoints: the newest (or --all
// of those the state keeps), each voter's digest and the verdict.
func runCheck(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	all := fs.Bool("all", false, "every checkpoint the state keeps, not only the newest")
	pos, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("check [--all]")
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := c.Check(ctx, &controlpb.CheckRequest{})
	if err != nil {
		return rpcErr("check", err)
	}
	cps := resp.Checkpoints
	if !*all && len(cps) > 1 {
		cps = cps[:1]
	}
	return g.printOut(cps, func(w *tabwriter.Writer) {
		if len(cps) == 0 {
			fmt.Fprintf(w, "no checkpoint yet (answered by %s)\n", resp.NodeId)
			return
		}
		for i, cp := range cps {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "CHECKPOINT\t%d\t%s\t%s by %s\n", cp.Index, time.Unix(0, cp.TimeUnixNano).UTC().Format(time.RFC3339), orDash(cp.Reason), orDash(cp.Actor))
			fmt.Fprintf(w, "VERDICT\t%s\n", cp.Verdict)
			fmt.Fprintf(w, "NODE\tDIGEST\tMATCHES MAJORITY\n")
			for _, v := range cp.Voters {
				digest, match := "(no report)", "-"
				for _, r := range cp.Reports {
					if r.NodeId == v {
						digest = r.Digest
						switch {
						case cp.MajorityDigest == "":
							match = "no majority"
						case r.Digest == cp.MajorityDigest:
							match = "yes"
						default:
							match = "NO: diverged"
						}
					}
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", v, digest, match)
			}
		}
		fmt.Fprintf(w, "(answered by %s; voters: %s)\n", resp.NodeId, strings.Join(cps[0].Voters, ", "))
	})
}
