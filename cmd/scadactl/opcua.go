package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/uasec"
)

const opcuaUsage = "opcua pick URL,URL | opcua watch URL,URL NODEID | opcua client-cert --uri URI --dir DIR [--name NAME] [--host HOST] [--overwrite] | " +
	opcuaTrustUsage + " | " + opcuaUsersUsage + "; " +
	"pick and watch take --security-policy, --security-mode, --cert, --key, --server-cert, --user, --password-file"

func runOPCUA(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("%s", opcuaUsage)
	}
	switch args[0] {
	case "trust":
		return runOPCUATrust(ctx, g, args[1:])
	case "users":
		return runOPCUAUsers(ctx, g, args[1:])
	}
	// client-cert and pick/watch register only their own flags, so each
	// -h lists what it takes and a flag meant for the other is refused.
	fs := flag.NewFlagSet("opcua "+args[0], flag.ContinueOnError)
	if args[0] == "client-cert" {
		uri := fs.String("uri", "", "the client's application URI, e.g. urn:plant:hmi-1")
		dir := fs.String("dir", "", "folder to write NAME.der and NAME.key.pem to")
		name := fs.String("name", "opcua-client", "file name stem")
		host := fs.String("host", "", "the client's host name or IP address, as a subject alternative name")
		overwrite := fs.Bool("overwrite", false, "replace files that are there")
		pos, err := g.parseFlags(fs, args[1:])
		if err != nil {
			return err
		}
		return opcuaClientCert(g, pos, *uri, *dir, *name, *host, *overwrite)
	}
	policy := fs.String("security-policy", "None", "security policy (None, Basic256Sha256, ...)")
	mode := fs.String("security-mode", "None", "None, Sign or SignAndEncrypt")
	certFile := fs.String("cert", "", "client application certificate (PEM or DER), needed for Sign and SignAndEncrypt")
	keyFile := fs.String("key", "", "its RSA private key")
	serverCert := fs.String("server-cert", "", "the servers' certificates or their CA (PEM or DER); others are refused (default: any)")
	user := fs.String("user", "", "user name (empty: anonymous)")
	passwordFile := fs.String("password-file", "", "file holding the user's password")
	pos, err := g.parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	args = append(args[:1:1], pos...)
	if len(args) < 2 {
		return usagef("%s", opcuaUsage)
	}
	opts := uasec.ClientOptions{SecurityPolicy: *policy, SecurityMode: *mode, Username: *user}
	if *certFile != "" || *keyFile != "" {
		opts.Certificate, opts.PrivateKey, err = uasec.LoadClientIdentity(*certFile, *keyFile)
		if err != nil {
			return usagef("opcua %s: %v", args[0], err)
		}
	}
	if *serverCert != "" {
		if opts.ServerCertificates, err = uasec.ReadCertificateFile(*serverCert); err != nil {
			return usagef("opcua %s: --server-cert: %v", args[0], err)
		}
	}
	if *mode != "None" && opts.Certificate == nil {
		return usagef("opcua %s: --security-mode %s needs --cert and --key (a client application certificate the servers trust)", args[0], *mode)
	}
	if *user != "" {
		if *passwordFile == "" {
			return usagef("opcua %s: --user needs --password-file", args[0])
		}
		if opts.Password, err = uasec.ReadPasswordFile(*passwordFile); err != nil {
			return usagef("opcua %s: --password-file: %v", args[0], err)
		}
	}
	urls := splitList(args[1])
	switch args[0] {
	case "pick":
		if len(args) != 2 {
			return usagef("opcua pick URL,URL")
		}
		best, levels, err := opcua.PickWith(ctx, urls, opts)
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
			return usagef("opcua watch URL,URL NODEID (e.g. \"ns=2;s=Pump1.Speed\")")
		}
		// Watch prints one line per notification and every failover with
		// the gap it caused, until interrupted; with --output json one
		// JSON object per line (NDJSON), for a script to follow.
		emit := func(e opcua.WatchEvent) { fmt.Fprint(g.stdout, e.Text()) }
		if g.output == "json" {
			enc := json.NewEncoder(g.stdout)
			emit = func(e opcua.WatchEvent) {
				e.Value = jsonValue(e.Value)
				if err := enc.Encode(e); err != nil {
					fmt.Fprintf(g.stderr, "opcua watch: %v\n", err)
				}
			}
		}
		err := opcua.WatchEvents(ctx, urls, args[2], opts, emit)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("opcua watch: %w", err)
		}
		return nil
	default:
		return usagef("opcua: unknown subcommand %q (pick, watch, client-cert)", strings.TrimSpace(args[0]))
	}
}

// jsonValue is an OPC UA value as JSON can carry it: NaN and ±Inf,
// which JSON has no numbers for, as the strings "NaN", "+Inf", "-Inf"
// (as tag history sends them).
func jsonValue(v any) any {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	default:
		return v
	}
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return v
}

// opcuaClientCert makes a self-signed client application certificate for
// the secure endpoints, and says where the servers want it.
func opcuaClientCert(g *globals, extra []string, uri, dir, name, host string, overwrite bool) error {
	if len(extra) != 0 || uri == "" || dir == "" || name == "" {
		return usagef("opcua client-cert --uri URI --dir DIR [--name NAME] [--host HOST] [--overwrite]")
	}
	certFile, keyFile := filepath.Join(dir, name+".der"), filepath.Join(dir, name+".key.pem")
	if !overwrite {
		for _, f := range []string{certFile, keyFile} {
			if _, err := os.Stat(f); err == nil {
				return usagef("opcua client-cert: %s exists (--overwrite replaces it)", f)
			}
		}
	}
	if err := opcua.WriteSelfSigned(certFile, keyFile, uri, host); err != nil {
		return fmt.Errorf("opcua client-cert: %w", err)
	}
	der, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("opcua client-cert: %w", err)
	}
	thumb := uasec.Thumbprint(der)
	return g.printOut(map[string]any{"certificate": certFile, "key": keyFile, "thumbprint": thumb}, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "wrote %s and %s (thumbprint %s)\n", certFile, keyFile, thumb)
		fmt.Fprintf(w, "the servers accept it once %s is copied into <data_dir>/opcua/pki/trusted on every node\n", filepath.Base(certFile))
	})
}
