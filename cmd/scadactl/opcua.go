package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/scadad/scadad/opcua"
)

func runOPCUA(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 {
		fs := flag.NewFlagSet("opcua "+args[0], flag.ContinueOnError)
		pos, err := g.parseFlags(fs, args[1:])
		if err != nil {
			return err
		}
		args = append(args[:1:1], pos...)
	}
	if len(args) < 2 {
		return usagef("opcua pick URL,URL | opcua watch URL,URL NODEID")
	}
	urls := splitList(args[1])
	switch args[0] {
	case "pick":
		if len(args) != 2 {
			return usagef("opcua pick URL,URL")
		}
		best, levels, err := opcua.Pick(ctx, urls)
		if err != nil {
			return fmt.Errorf("opcua pick: %w", err)
		}
		return g.printOut(map[string]any{"picked": best, "service_levels": levels}, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "ENDPOINT\tSERVICELEVEL\tPICKED\n")
			for _, u := range urls {
				lvl, ok := levels[u]
				shown := "unreachable"
				if ok {
					shown = fmt.Sprint(lvl)
				}
				fmt.Fprintf(w, "%s\t%s\t%v\n", u, shown, u == best)
			}
		})
	case "watch":
		if len(args) != 3 {
			return usagef("opcua watch URL,URL NODEID (e.g. \"ns=1;s=Pump1.Speed\")")
		}
		// Watch prints one line per notification and every failover with
		// the gap it caused, until interrupted.
		err := opcua.Watch(ctx, urls, args[2], g.stdout)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("opcua watch: %w", err)
		}
		return nil
	default:
		return usagef("opcua: unknown subcommand %q (pick, watch)", strings.TrimSpace(args[0]))
	}
}
