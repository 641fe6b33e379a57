package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/pki"
)

func runCerts(_ context.Context, g *globals, args []string) error {
	const usage = "certs init --dir DIR --nodes node-a,node-b,witness [--clients operator] [--site NAME] [--days N] [--ca-days N] [--overwrite] | certs issue --dir DIR --name NAME [--client --role viewer|operator|admin|producer [--targets T,...]] [--san HOST,...] [--days N] [--overwrite]"
	if len(args) == 0 || (args[0] != "init" && args[0] != "issue") {
		return usagef("%s", usage)
	}
	// init and issue register only their own flags, so each -h lists what
	// it takes and a flag meant for the other is refused.
	var (
		site, nodes, clients, name, roleName, targets, sans string
		client                                              bool
		caDays                                              int
	)
	fs := flag.NewFlagSet("certs "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", "", "folder of the site CA and certificates")
	days := fs.Int("days", 825, "validity in days of node and client certificates (issue: no later than the CA's end)")
	if args[0] == "init" {
		fs.StringVar(&site, "site", "scadad", "site name, used in the CA's subject")
		fs.StringVar(&nodes, "nodes", "", "comma-separated node ids")
		fs.StringVar(&clients, "clients", "operator", "comma-separated client names")
		fs.IntVar(&caDays, "ca-days", 3650, "validity in days of the site CA, at least --days: a CA that outlives its certificates lets them be renewed one node at a time")
	} else {
		fs.StringVar(&name, "name", "", "the node id or client name to certify")
		fs.BoolVar(&client, "client", false, "a client (operator tool or producer) certificate instead of a node's")
		fs.StringVar(&roleName, "role", "", "with --client: what its holder may do: viewer (reads), operator (also fails over, deploys, retries and discards), admin (also membership, overrides, restores, tokens, revocation) or producer (enqueues only)")
		fs.StringVar(&targets, "targets", "", "with --client: comma-separated store-and-forward targets the certificate may enqueue to over HTTP (default any)")
		fs.StringVar(&sans, "san", "", "comma-separated extra host names or IP addresses (a node's peers dial it by)")
	}
	overwrite := fs.Bool("overwrite", false, "replace what is there (init: the CA, which cuts every issued certificate off the site; asks first)")
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if *days < 1 {
		return usagef("--days must be at least 1")
	}
	if args[0] == "init" && caDays < *days {
		return usagef("--ca-days (%d) must be at least --days (%d): the CA must outlive the certificates it signs", caDays, *days)
	}
	validity := time.Duration(*days) * 24 * time.Hour
	if args[0] == "issue" {
		if len(pos) != 0 || *dir == "" || name == "" {
			return usagef("certs issue --dir DIR --name NAME [--client --role viewer|operator|admin|producer [--targets T,...]] [--san HOST,...] [--days N] [--overwrite]")
		}
		usage, kind, role := pki.NodeUsage, "node", pki.RoleNone
		if client {
			if roleName == "" {
				return usagef("certs issue --client needs --role viewer|operator|admin|producer: a client certificate says what its holder may do")
			}
			r, err := pki.ParseRole(roleName)
			if err != nil {
				return usagef("certs issue --role: %v", err)
			}
			usage, kind, role = pki.ClientUsage, "client ("+string(r)+")", r
		} else if roleName != "" || targets != "" {
			return usagef("certs issue --role and --targets are for --client certificates; a node certificate carries neither")
		}
		if err := pki.IssueLimited(*dir, name, usage, role, splitList(targets), validity, *overwrite, splitList(sans)...); err != nil {
			return fmt.Errorf("certs issue: %w", err)
		}
		return g.printOut(map[string]any{"dir": *dir, "name": name, "kind": kind}, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "wrote a %s certificate for %s signed by the site CA in %s\n", kind, name, *dir)
		})
	}
	if len(pos) != 0 || *dir == "" || nodes == "" {
		return usagef("certs init --dir DIR --nodes node-a,node-b,witness [--clients operator] [--site NAME] [--days N] [--ca-days N] [--overwrite]")
	}
	opts := []pki.InitOption{pki.WithCAValidity(time.Duration(caDays) * 24 * time.Hour)}
	if *overwrite {
		if _, err := os.Stat(filepath.Join(*dir, "ca.crt")); err == nil {
			if err := g.confirm(fmt.Sprintf("Replace the site CA in %s? Every certificate it issued stops being trusted: every node needs new files and a restart at once.", *dir)); err != nil {
				return err
			}
		}
		opts = append(opts, pki.WithOverwrite())
	}
	nodeList, clientList := splitList(nodes), splitList(clients)
	if err := pki.Init(*dir, site, nodeList, clientList, validity, opts...); err != nil {
		return fmt.Errorf("certs init: %w", err)
	}
	return g.printOut(map[string]any{"dir": *dir, "site": site, "nodes": nodeList, "clients": clientList}, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "wrote a site CA and certificates for nodes %s and clients %s to %s\n", strings.Join(nodeList, ", "), strings.Join(clientList, ", "), *dir)
	})
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
