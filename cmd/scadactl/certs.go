package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/pki"
)

func runCerts(ctx context.Context, g *globals, args []string) error {
	const usage = "certs init --dir DIR --nodes node-a,node-b,witness [--clients operator] [--site NAME] [--days N] [--ca-days N] [--overwrite] | certs issue --dir DIR --name NAME [--client --role viewer|operator|admin|producer [--targets T,...]] [--san HOST,...] [--days N] [--overwrite] | certs revoke SERIAL|FILE [--reason TEXT] | certs list --dir DIR"
	if len(args) > 0 && args[0] == "revoke" {
		return runCertsRevoke(ctx, g, args[1:])
	}
	if len(args) > 0 && args[0] == "list" {
		return runCertsList(ctx, g, args[1:])
	}
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
		fs.StringVar(&roleName, "role", "", "with --client: what its holder may do: viewer (reads), operator (also fails over, deploys, retries and discards), admin (also membership, overrides, restores, revocation) or producer (enqueues only)")
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

// runCertsRevoke puts a certificate on the cluster's deny list: every node
// refuses it at the next handshake and closes its connections.
func runCertsRevoke(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("certs revoke", flag.ContinueOnError)
	reason := fs.String("reason", "", "why, for the audit log")
	pos, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("certs revoke SERIAL|FILE [--reason TEXT]: one serial (hex, as certs list shows it) or one certificate file")
	}
	serial, name, err := revokeTarget(pos[0])
	if err != nil {
		return usagef("certs revoke: %v", err)
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := c.CertRevoke(ctx, &controlpb.CertRevokeRequest{Serial: serial, Name: name, Reason: *reason})
	if err != nil {
		return rpcErr("certs revoke", err)
	}
	label := resp.Serial
	if name != "" {
		label += " (" + name + ")"
	}
	fmt.Fprintf(g.stdout, "revoked %s: every node refuses it from now on\n", label)
	return nil
}

// revokeTarget reads what to revoke: a PEM certificate file, or a serial.
func revokeTarget(arg string) (serial, name string, err error) {
	if data, rerr := os.ReadFile(arg); rerr == nil {
		block, _ := pem.Decode(data)
		if block == nil || block.Type != "CERTIFICATE" {
			return "", "", fmt.Errorf("%s holds no PEM certificate", arg)
		}
		cert, perr := x509.ParseCertificate(block.Bytes)
		if perr != nil {
			return "", "", fmt.Errorf("%s: %v", arg, perr)
		}
		return pki.SerialHex(cert), cert.Subject.CommonName, nil
	}
	serial, err = pki.ParseSerial(arg)
	if err != nil {
		return "", "", fmt.Errorf("%q is neither a readable certificate file nor a serial: %v", arg, err)
	}
	return serial, "", nil
}

// certsListRow is one line of certs list.
type certsListRow struct {
	pki.Issued
	Revoked bool `json:"revoked"`
}

// runCertsList shows what the CA folder's issuance record says was issued
// and, from the cluster, what of it (and anything else) is revoked.
func runCertsList(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("certs list", flag.ContinueOnError)
	dir := fs.String("dir", "", "folder of the site CA and its issuance record")
	pos, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *dir == "" {
		return usagef("certs list --dir DIR")
	}
	issued, err := pki.ReadIssued(*dir)
	if err != nil {
		return fmt.Errorf("certs list: %w", err)
	}
	revoked := map[string]*controlpb.RevokedCertificate{}
	known := true
	if c, done, cerr := g.connect(ctx); cerr != nil {
		known = false
		fmt.Fprintf(g.stderr, "scadactl: certs list: no node answered (%v); the REVOKED column is unknown\n", cerr)
	} else {
		resp, rerr := c.CertRevoked(ctx, &controlpb.CertRevokedRequest{})
		done()
		if rerr != nil {
			return rpcErr("certs list", rerr)
		}
		for _, r := range resp.Revoked {
			revoked[r.Serial] = r
		}
	}
	rows := make([]certsListRow, 0, len(issued))
	for _, rec := range issued {
		_, gone := revoked[rec.Serial]
		rows = append(rows, certsListRow{Issued: rec, Revoked: gone})
		delete(revoked, rec.Serial)
	}
	for _, r := range revoked { // revoked, but not in this folder's record
		rows = append(rows, certsListRow{Issued: pki.Issued{Serial: r.Serial, Name: r.Name}, Revoked: true})
	}
	return g.printOut(rows, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "SERIAL\tNAME\tUSAGE\tROLE\tEXPIRES\tREVOKED\n")
		for _, r := range rows {
			state := "no"
			switch {
			case r.Revoked:
				state = "yes"
			case !known:
				state = "?"
			}
			expires := "-"
			if !r.NotAfter.IsZero() {
				expires = r.NotAfter.Format("2006-01-02")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Serial, orDash(r.Name), orDash(r.Usage), orDash(string(r.Role)), expires, state)
		}
	})
}
