package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/scadad/scadad/pki"
)

func runCerts(_ context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] != "init" {
		return usagef("certs init --dir DIR --nodes node-a,node-b,witness [--clients operator] [--site NAME] [--days N]")
	}
	fs := flag.NewFlagSet("certs init", flag.ContinueOnError)
	dir := fs.String("dir", "", "folder to write the CA and certificates into")
	site := fs.String("site", "scadad", "site name, used in the CA's subject")
	nodes := fs.String("nodes", "", "comma-separated node ids")
	clients := fs.String("clients", "operator", "comma-separated client names")
	days := fs.Int("days", 825, "validity in days")
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 || *dir == "" || *nodes == "" {
		return usagef("certs init --dir DIR --nodes node-a,node-b,witness [--clients operator]")
	}
	if *days < 1 {
		return usagef("--days must be at least 1")
	}
	nodeList, clientList := splitList(*nodes), splitList(*clients)
	if err := pki.Init(*dir, *site, nodeList, clientList, time.Duration(*days)*24*time.Hour); err != nil {
		return fmt.Errorf("certs init: %w", err)
	}
	fmt.Fprintf(g.stdout, "wrote a site CA and certificates for nodes %s and clients %s to %s\n", strings.Join(nodeList, ", "), strings.Join(clientList, ", "), *dir)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
