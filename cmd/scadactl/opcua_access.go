package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/passhash"
	"github.com/scadad/scadad/uasec"
)

const (
	opcuaTrustUsage = "opcua trust add FILE [--name N] | add --rejected THUMBPRINT [--name N] | list | remove THUMBPRINT | rejected | import DIR"
	opcuaUsersUsage = "opcua users set NAME [--password-file F] [--can-write] | list | remove NAME"
)

// runOPCUATrust manages the replicated OPC UA trust store.
func runOPCUATrust(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("%s", opcuaTrustUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("opcua trust "+sub, flag.ContinueOnError)
	var name, rejected string
	if sub == "add" {
		fs.StringVar(&name, "name", "", "a name for the certificate in listings (default its common name)")
		fs.StringVar(&rejected, "rejected", "", "trust the certificate a node refused with this thumbprint (from opcua trust rejected) instead of a file")
	}
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	switch sub {
	case "add":
		req := &controlpb.OPCUATrustAddRequest{Name: name, RejectedThumbprint: rejected}
		switch {
		case rejected != "" && len(pos) == 0:
		case rejected == "" && len(pos) == 1:
			certs, err := uasec.ReadCertificateFile(pos[0])
			if err != nil {
				return usagef("opcua trust add: %v", err)
			}
			if len(certs) != 1 {
				return usagef("opcua trust add: %s holds %d certificates; give one per file, or use opcua trust import DIR", pos[0], len(certs))
			}
			req.Der = certs[0].Raw
			if req.Name == "" {
				req.Name = certs[0].Subject.CommonName
			}
		default:
			return usagef("opcua trust add FILE [--name N] | add --rejected THUMBPRINT")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.OPCUATrustAdd(ctx, req)
		if err != nil {
			return rpcErr("opcua trust add", err)
		}
		return g.printOut(resp, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "trusted %s (%s) on every node's OPC UA server, from its next secure channel\n", resp.Thumbprint, resp.Subject)
		})
	case "import":
		if len(pos) != 1 {
			return usagef("opcua trust import DIR (a node's <data_dir>/opcua/pki/trusted folder)")
		}
		return opcuaTrustImport(ctx, g, pos[0])
	case "list":
		if len(pos) != 0 {
			return usagef("opcua trust list")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.OPCUATrustList(ctx, &controlpb.OPCUATrustListRequest{})
		if err != nil {
			return rpcErr("opcua trust list", err)
		}
		return g.printOut(resp.Trusted, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "THUMBPRINT\tNAME\tAPPLICATION URI\tCA\tEXPIRES\tADDED BY\n")
			for _, t := range resp.Trusted {
				ca := "no"
				if t.IsCa {
					ca = "yes"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Thumbprint, orDash(t.Name), orDash(t.ApplicationUri), ca, unixDate(t.NotAfterUnix), orDash(t.Actor))
			}
		})
	case "remove":
		if len(pos) != 1 {
			return usagef("opcua trust remove THUMBPRINT")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, err := c.OPCUATrustRemove(ctx, &controlpb.OPCUATrustRemoveRequest{Thumbprint: pos[0]}); err != nil {
			return rpcErr("opcua trust remove", err)
		}
		fmt.Fprintf(g.stdout, "removed %s: its next secure channel is refused on every node\n", pos[0])
		return nil
	case "rejected":
		if len(pos) != 0 {
			return usagef("opcua trust rejected")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.OPCUATrustRejected(ctx, &controlpb.OPCUATrustRejectedRequest{})
		if err != nil {
			return rpcErr("opcua trust rejected", err)
		}
		return g.printOut(resp.Rejected, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "THUMBPRINT\tAPPLICATION URI\tSUBJECT\tREFUSED BY\tLAST\tCOUNT\n")
			for _, r := range resp.Rejected {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", r.Thumbprint, orDash(r.ApplicationUri), orDash(r.Subject), strings.Join(r.Nodes, ","),
					time.Unix(0, r.LastUnixNano).UTC().Format(time.RFC3339), r.Count)
			}
		})
	}
	return usagef("opcua trust: unknown subcommand %q (add, list, remove, rejected, import)", sub)
}

func unixDate(s int64) string {
	if s == 0 {
		return "-"
	}
	return time.Unix(s, 0).UTC().Format(time.DateOnly)
}

// opcuaTrustImport trusts every certificate of a node's trusted folder
// (the per-node trust list of earlier releases) on every node.
func opcuaTrustImport(ctx context.Context, g *globals, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return usagef("opcua trust import: %v", err)
	}
	var certs []*x509.Certificate
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		got, err := uasec.ReadCertificateFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return usagef("opcua trust import: %v (nothing imported)", err)
		}
		certs = append(certs, got...)
	}
	if len(certs) == 0 {
		return usagef("opcua trust import: %s holds no certificates", dir)
	}
	c, done, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	for i, cert := range certs {
		resp, err := c.OPCUATrustAdd(ctx, &controlpb.OPCUATrustAddRequest{Der: cert.Raw, Name: cert.Subject.CommonName})
		if err != nil {
			return rpcErr(fmt.Sprintf("opcua trust import (%d of %d imported)", i, len(certs)), err)
		}
		fmt.Fprintf(g.stdout, "trusted %s (%s)\n", resp.Thumbprint, resp.Subject)
	}
	fmt.Fprintf(g.stdout, "imported %d certificates; nodes no longer read the folder (since v0.2.0): once every node's folder is imported, empty it\n", len(certs))
	return nil
}

// runOPCUAUsers manages the replicated OPC UA user-name identities.
func runOPCUAUsers(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("%s", opcuaUsersUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("opcua users "+sub, flag.ContinueOnError)
	var passwordFile string
	var canWrite bool
	if sub == "set" {
		fs.StringVar(&passwordFile, "password-file", "", "file holding the password (default: asked for on the terminal; never on the command line)")
		fs.BoolVar(&canWrite, "can-write", false, "the user's writes go on to the role gate (default: reads only)")
	}
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	switch sub {
	case "set":
		if len(pos) != 1 {
			return usagef("opcua users set NAME [--password-file F] [--can-write]")
		}
		password, err := g.readNewPassword(pos[0], passwordFile)
		if err != nil {
			return err
		}
		// Hashed here: the password never leaves this machine.
		hash, err := passhash.Hash(password, rand.Reader)
		clear(password)
		if err != nil {
			return usagef("opcua users set: %v", err)
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, err := c.OPCUAUserSet(ctx, &controlpb.OPCUAUserSetRequest{Name: pos[0], Hash: hash, CanWrite: canWrite}); err != nil {
			return rpcErr("opcua users set", err)
		}
		access := "reads only"
		if canWrite {
			access = "can write"
		}
		fmt.Fprintf(g.stdout, "set OPC UA user %s (%s) on every node, stored as an argon2id hash\n", pos[0], access)
		return nil
	case "list":
		if len(pos) != 0 {
			return usagef("opcua users list")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		resp, err := c.OPCUAUserList(ctx, &controlpb.OPCUAUserListRequest{})
		if err != nil {
			return rpcErr("opcua users list", err)
		}
		return g.printOut(resp.Users, func(w *tabwriter.Writer) {
			fmt.Fprintf(w, "NAME\tCAN WRITE\tSET BY\tSET\n")
			for _, u := range resp.Users {
				fmt.Fprintf(w, "%s\t%v\t%s\t%s\n", u.Name, u.CanWrite, orDash(u.Actor), time.Unix(u.SetUnix, 0).UTC().Format(time.RFC3339))
			}
		})
	case "remove":
		if len(pos) != 1 {
			return usagef("opcua users remove NAME")
		}
		c, done, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer done()
		if _, err := c.OPCUAUserRemove(ctx, &controlpb.OPCUAUserRemoveRequest{Name: pos[0]}); err != nil {
			return rpcErr("opcua users remove", err)
		}
		fmt.Fprintf(g.stdout, "removed OPC UA user %s: its next login is refused on every node\n", pos[0])
		return nil
	}
	return usagef("opcua users: unknown subcommand %q (set, list, remove)", sub)
}

// readNewPassword reads a password from file, or asks for it twice on the
// terminal; it is never taken from the command line, where other users of
// the machine and the shell's history would see it.
func (g *globals) readNewPassword(user, file string) ([]byte, error) {
	if file != "" {
		pw, err := uasec.ReadPasswordFile(file)
		if err != nil {
			return nil, usagef("opcua users set: --password-file: %v", err)
		}
		if pw == "" {
			return nil, usagef("opcua users set: %s holds an empty password", file)
		}
		return []byte(pw), nil
	}
	in, ok := g.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return nil, usagef("opcua users set: no terminal to ask for the password on; give --password-file F")
	}
	ask := func(prompt string) ([]byte, error) {
		fmt.Fprint(g.stderr, prompt)
		pw, err := term.ReadPassword(int(in.Fd()))
		fmt.Fprintln(g.stderr)
		return pw, err
	}
	pw, err := ask("password for OPC UA user " + user + ": ")
	if err != nil {
		return nil, fmt.Errorf("opcua users set: read password: %w", err)
	}
	again, err := ask("again: ")
	if err != nil {
		return nil, fmt.Errorf("opcua users set: read password: %w", err)
	}
	if string(pw) != string(again) || len(pw) == 0 {
		return nil, errors.New("opcua users set: the passwords differ or are empty; nothing changed")
	}
	return pw, nil
}
