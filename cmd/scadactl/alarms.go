package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/api/controlpb"
)

const alarmsUsage = "alarms list [--attention] | ack ID [--comment TEXT] [--confirm] | shelve ID [--for 8h] [--unshelve] [--comment TEXT]"

// runAlarms lists the replicated alarm state and acknowledges, confirms
// and shelves alarms as the caller's certificate name.
func runAlarms(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("%s", alarmsUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("alarms "+sub, flag.ContinueOnError)
	var attention, confirm, unshelve bool
	var comment string
	var dur time.Duration
	switch sub {
	case "list":
		fs.BoolVar(&attention, "attention", false, "only alarms that are active or unacknowledged")
	case "ack":
		fs.StringVar(&comment, "comment", "", "the operator's comment")
		fs.BoolVar(&confirm, "confirm", false, "confirm an acknowledged alarm instead")
	case "shelve":
		fs.StringVar(&comment, "comment", "", "the operator's comment")
		fs.DurationVar(&dur, "for", 0, "shelve for this long (default until unshelved)")
		fs.BoolVar(&unshelve, "unshelve", false, "unshelve instead")
	}
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if len(pos) != 0 {
			return usagef("alarms list [--attention]")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.AlarmList(ctx, &controlpb.AlarmListRequest{AttentionOnly: attention})
		if err != nil {
			return rpcErr("alarms list", err)
		}
		return g.printOut(resp.Alarms, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "ID\tSOURCE\tSEVERITY\tSTATE\tACTIVE\tACKED BY\tSHELVED\tSINCE\tMESSAGE\n")
			for _, a := range resp.Alarms {
				acked := "-"
				if a.Acked {
					acked = orDash(a.AckOperator)
				}
				since := "-"
				if a.Active && a.ActiveSinceUnixNano > 0 {
					since = time.Unix(0, a.ActiveSinceUnixNano).UTC().Format(time.RFC3339)
				}
				shelved := "-"
				if a.Shelved {
					shelved = orDash(a.ShelvedBy)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%v\t%s\t%s\t%s\t%s\n", a.Id, a.Source, a.Severity, orDash(a.State), a.Active, acked, shelved, since, a.Message)
			}
		})
	case "ack":
		if len(pos) != 1 {
			return usagef("alarms ack ID [--comment TEXT] [--confirm]")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, err := c.AlarmAck(ctx, &controlpb.AlarmAckRequest{Id: pos[0], Comment: comment, Confirm: confirm}); err != nil {
			return rpcErr("alarms ack", err)
		}
		what := "acknowledged"
		if confirm {
			what = "confirmed"
		}
		fmt.Fprintf(g.stdout, "%s alarm %s\n", what, pos[0])
		return nil
	case "shelve":
		if len(pos) != 1 {
			return usagef("alarms shelve ID [--for 8h] [--unshelve] [--comment TEXT]")
		}
		if dur < 0 {
			return usagef("alarms shelve --for: %v is negative", dur)
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		req := &controlpb.AlarmShelveRequest{Id: pos[0], Unshelve: unshelve, Comment: comment}
		if dur > 0 {
			req.UntilUnixNano = time.Now().Add(dur).UnixNano()
		}
		if _, err := c.AlarmShelve(ctx, req); err != nil {
			return rpcErr("alarms shelve", err)
		}
		what := "shelved"
		if unshelve {
			what = "unshelved"
		}
		fmt.Fprintf(g.stdout, "%s alarm %s\n", what, pos[0])
		return nil
	}
	return usagef("alarms: unknown subcommand %q (list, ack, shelve)", sub)
}
