package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/api/controlpb"
)

const tokensUsage = "tokens create --name NAME [--targets T,...] [--expires 90d] | list | revoke NAME"

// runTokens manages the bearer tokens producers enqueue with over HTTPS.
func runTokens(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("%s", tokensUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("tokens "+sub, flag.ContinueOnError)
	var name, targets, expires string
	if sub == "create" {
		fs.StringVar(&name, "name", "", "the token's name (who holds it: historian-feed)")
		fs.StringVar(&targets, "targets", "", "comma-separated targets it may enqueue to (default any)")
		fs.StringVar(&expires, "expires", "", "lifetime: 90d, 12h, … (default never)")
	}
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	switch sub {
	case "create":
		if len(pos) != 0 || name == "" {
			return usagef("tokens create --name NAME [--targets T,...] [--expires 90d]")
		}
		life, err := parseLifetime(expires)
		if err != nil {
			return usagef("tokens create --expires: %v", err)
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.TokenCreate(ctx, &controlpb.TokenCreateRequest{Name: name, Targets: splitList(targets), ExpiresInSeconds: int64(life / time.Second)})
		if err != nil {
			return rpcErr("tokens create", err)
		}
		return g.printOut(resp, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "%s\n", resp.Token)
			fmt.Fprintf(g.stderr, "token %s: shown this once, stored only as its SHA-256; send it as Authorization: Bearer <token>\n", resp.Name)
		})
	case "list":
		if len(pos) != 0 {
			return usagef("tokens list")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.TokenList(ctx, &controlpb.TokenListRequest{})
		if err != nil {
			return rpcErr("tokens list", err)
		}
		return g.printOut(resp.Tokens, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "NAME\tTARGETS\tEXPIRES\tCREATED BY\n")
			for _, t := range resp.Tokens {
				exp := "never"
				if t.ExpiresUnix != 0 {
					exp = time.Unix(t.ExpiresUnix, 0).UTC().Format(time.RFC3339)
				}
				tg := strings.Join(t.Targets, ",")
				if tg == "" {
					tg = "(any)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", t.Name, tg, exp, orDash(t.Actor))
			}
		})
	case "revoke":
		if len(pos) != 1 {
			return usagef("tokens revoke NAME")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, err := c.TokenRevoke(ctx, &controlpb.TokenRevokeRequest{Name: pos[0]}); err != nil {
			return rpcErr("tokens revoke", err)
		}
		fmt.Fprintf(g.stdout, "revoked token %s: the next request with it is refused\n", pos[0])
		return nil
	}
	return usagef("tokens: unknown subcommand %q (create, list, revoke)", sub)
}

// parseLifetime reads "90d" (days) or a Go duration; empty is never.
func parseLifetime(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%q: want a positive number of days (90d) or a duration (12h)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%q: want a positive number of days (90d) or a duration of at least 1s (12h)", s)
	}
	return d, nil
}
