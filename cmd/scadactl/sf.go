package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/api/controlpb"
)

const sfUsage = "sf stats [--local] | targets [--local] | list [--target T] [--parked] [--limit N] | retry ID...|--all --target T | discard ID...|--all --target T | enqueue TARGET [--id ID] [--data TEXT]"

func runSF(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("%s", sfUsage)
	}
	sub := args[0]
	// Each subcommand registers only its own flags, so its -h lists what
	// it takes and a flag meant for another (sf stats --parked) is refused.
	var (
		target, id, data   string
		parked, all, local bool
		limit              int
	)
	fs := flag.NewFlagSet("sf "+sub, flag.ContinueOnError)
	switch sub {
	case "stats", "targets":
		fs.BoolVar(&local, "local", false, "the answering node's own replica instead of the Active's figures")
	case "list":
		fs.StringVar(&target, "target", "", "only this target's messages (default: every target)")
		fs.BoolVar(&parked, "parked", false, "list parked messages instead of pending ones")
		fs.IntVar(&limit, "limit", 100, "list at most this many messages")
	case "retry", "discard":
		fs.StringVar(&target, "target", "", "with --all: the target whose parked messages to "+sub)
		fs.BoolVar(&all, "all", false, "every parked message of --target")
	case "enqueue":
		fs.StringVar(&id, "id", "", "idempotency key (generated when empty)")
		fs.StringVar(&data, "data", "", "payload (default: read standard input)")
	default:
		return usagef("sf: unknown subcommand %q (stats, targets, list, retry, discard, enqueue)", sub)
	}
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	switch sub {
	case "stats":
		resp, err := c.SFStats(ctx, &controlpb.SFStatsRequest{Local: local})
		if err != nil {
			return rpcErr("sf stats", err)
		}
		if !resp.Live && resp.Node != "" {
			fmt.Fprintf(g.stderr, "scadactl: figures from %s's replica, not the Active's: delivery rate and last error unknown\n", resp.Node)
		}
		return g.printOut(resp.Targets, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "TARGET\tPENDING\tPARKED\tOLDEST AGE\tDELIVERED/S\tDELIVERED\tLAST ERROR\n")
			for _, t := range resp.Targets {
				age := "-"
				if t.OldestUnixNano > 0 {
					age = time.Since(time.Unix(0, t.OldestUnixNano)).Round(time.Second).String()
				}
				pending := fmt.Sprint(t.Pending)
				if t.MaxPending > 0 {
					pending += fmt.Sprintf("/%d", t.MaxPending) // of its max_pending
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%.1f\t%d\t%s\n", t.Target, pending, t.Parked, age, t.DeliveredPerSec, t.DeliveredTotal, orDash(t.LastError))
			}
		})
	case "targets":
		resp, err := c.SFStats(ctx, &controlpb.SFStatsRequest{Local: local})
		if err != nil {
			return rpcErr("sf targets", err)
		}
		if !resp.Live && resp.Node != "" {
			fmt.Fprintf(g.stderr, "scadactl: from %s, which is not the Active: the state says what it does, not what the Active does\n", resp.Node)
		}
		return g.printOut(resp.Targets, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "TARGET\tKIND\tENDPOINT\tBATCH\tIN FLIGHT\tSTATE\tPENDING\tPARKED\tLAST ERROR\n")
			for _, t := range resp.Targets {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%s\n", t.Target, orDash(t.Kind), orDash(t.Endpoint), t.BatchMaxMessages, t.MaxInFlight,
					t.State, t.Pending, t.Parked, orDash(oneLine(t.LastError)))
			}
		})
	case "list":
		resp, err := c.SFList(ctx, &controlpb.SFListRequest{Target: target, Parked: parked, Limit: int32(limit)})
		if err != nil {
			return rpcErr("sf list", err)
		}
		return g.printOut(resp.Messages, func(w *tabwriter.Writer) {
			// LAST ERROR is a pending message's latest failed attempt or
			// what parked a parked one.
			fmt.Fprintf(w, "ID\tTARGET\tSEQ\tENQUEUED\tSIZE\tATTEMPTS\tLAST ERROR\n")
			for _, m := range resp.Messages {
				lastErr := m.LastError
				if m.ParkReason != "" {
					lastErr = m.ParkReason
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", m.Id, m.Target, m.Seq, time.Unix(0, m.EnqueuedUnixNano).UTC().Format(time.RFC3339), m.Size, m.Attempts, orDash(oneLine(lastErr)))
			}
		})
	case "retry", "discard":
		req := &controlpb.SFSelectRequest{Ids: pos}
		if all {
			if target == "" || len(pos) > 0 {
				return usagef("sf %s --all needs --target and no ids", sub)
			}
			req.AllOfTarget = target
		} else if len(pos) == 0 {
			return usagef("sf %s ID... | --all --target T", sub)
		}
		if sub == "discard" {
			what := fmt.Sprintf("%d parked message(s)", len(pos))
			if all {
				what = "every parked message of " + target
			}
			if err := g.confirm("Discard " + what + "? They will never be delivered."); err != nil {
				return err
			}
		}
		call := c.SFRetry
		if sub == "discard" {
			call = c.SFDiscard
		}
		resp, err := call(ctx, req)
		if err != nil {
			return rpcErr("sf "+sub, err)
		}
		return g.printOut(resp, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "%s: %d message(s)\n", sub, resp.Affected)
		})
	case "enqueue":
		if len(pos) != 1 {
			return usagef("sf enqueue TARGET [--id ID] [--data TEXT]")
		}
		payload := []byte(data)
		if !flagGiven(fs, "data") {
			if payload, err = io.ReadAll(io.LimitReader(g.stdin, 64<<20)); err != nil {
				return fmt.Errorf("sf enqueue: read payload: %w", err)
			}
			if len(payload) == 0 {
				return usagef("sf enqueue: no payload on standard input (pipe it in, or pass --data TEXT; --data '' sends an empty message)")
			}
		}
		// The answer comes within --timeout too: a cluster without a
		// quorum says so (Unavailable) rather than keeping the caller.
		callCtx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		resp, err := c.SFEnqueue(callCtx, &controlpb.SFEnqueueRequest{Target: pos[0], Payload: payload, Id: strings.TrimSpace(id)})
		if err != nil {
			return rpcErr("sf enqueue", err)
		}
		return g.printOut(resp, func(w *tabwriter.Writer) {
			if resp.Duplicate {
				fmt.Fprintf(w, "already stored: %s\n", resp.Id)
				return
			}
			fmt.Fprintf(w, "enqueued %s\n", resp.Id)
		})
	}
	return nil
}
