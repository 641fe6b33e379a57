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
	const usage = "certs init --dir DIR --nodes node-a,node-b,witness [--clients operator] [--site NAME] [--days N] [--ca-days N] [--overwrite] | certs issue --dir DIR --name NAME [--client --role viewer|operator|admin|producer [--targets T,...]] [--san HOST,...] [--days N] [--overwrite]"
	if len(args) == 0 || (args[0] != "init" && args[0] != "issue") {
		return usagef("%s", usage)
	}
	fs := flag.NewFlagSet("certs "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", "", "folder of the site CA and certificates")
	site := fs.String("site", "scadad", "init: site name, used in the CA's subject")
	nodes := fs.String("nodes", "", "init: comma-separated node ids")
	clients := fs.String("clients", "operator", "init: comma-separated client names")
	name := fs.String("name", "", "issue: the node id or client name to certify")
	client := fs.Bool("client", false, "issue: a client (operator tool or producer) certificate instead of a node's")
	roleName := fs.String("role", "", "issue --client: what its holder may do: viewer (reads), operator (also fails over, deploys, retries and discards), admin (also membership, overrides, restores, tokens, revocation) or producer (enqueues only)")
	targets := fs.String("targets", "", "issue --client: comma-separated store-and-forward targets the certificate may enqueue to over HTTP (default any)")
	sans := fs.String("san", "", "issue: comma-separated extra host names or IP addresses (a node's peers dial it by)")
	days := fs.Int("days", 825, "validity in days of node and client certificates (issue: no later than the CA's end)")
	caDays := fs.Int("ca-days", 3650, "init: validity in days of the site CA, at least --days: a CA that outlives its certificates lets them be renewed one node at a time")
	overwrite := fs.Bool("overwrite", false, "replace what is there (init: the CA, which cuts every issued certificate off the site)")
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if *days < 1 {
		return usagef("--days must be at least 1")
	}
	if args[0] == "init" && *caDays < *days {
		return usagef("--ca-days (%d) must be at least --days (%d): the CA must outlive the certificates it signs", *caDays, *days)
	}
	validity := time.Duration(*days) * 24 * time.Hour
	if args[0] == "issue" {
		if len(pos) != 0 || *dir == "" || *name == "" {
			return usagef("certs issue --dir DIR --name NAME [--client --role viewer|operator|admin|producer [--targets T,...]] [--san HOST,...] [--days N] [--overwrite]")
		}
		usage, kind, role := pki.NodeUsage, "node", pki.RoleNone
		if *client {
			if *roleName == "" {
				return usagef("certs issue --client needs --role viewer|operator|admin|producer: a client certificate says what its holder may do")
			}
			r, err := pki.ParseRole(*roleName)
			if err != nil {
				return usagef("certs issue --role: %v", err)
			}
			usage, kind, role = pki.ClientUsage, "client ("+string(r)+")", r
		} else if *roleName != "" || *targets != "" {
			return usagef("certs issue --role and --targets are for --client certificates; a node certificate carries neither")
		}
		if err := pki.IssueLimited(*dir, *name, usage, role, splitList(*targets), validity, *overwrite, splitList(*sans)...); err != nil {
			return fmt.Errorf("certs issue: %w", err)
		}
		fmt.Fprintf(g.stdout, "wrote a %s certificate for %s signed by the site CA in %s\n", kind, *name, *dir)
		return nil
	}
	if len(pos) != 0 || *dir == "" || *nodes == "" {
		return usagef("certs init --dir DIR --nodes node-a,node-b,witness [--clients operator] [--site NAME] [--days N] [--ca-days N] [--overwrite]")
	}
	opts := []pki.InitOption{pki.WithCAValidity(time.Duration(*caDays) * 24 * time.Hour)}
	if *overwrite {
		opts = append(opts, pki.WithOverwrite())
	}
	nodeList, clientList := splitList(*nodes), splitList(*clients)
	if err := pki.Init(*dir, *site, nodeList, clientList, validity, opts...); err != nil {
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
