package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes, see doc.go.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitUnreachable = 3
	exitRefused     = 4
	exitNotFound    = 5
)

// usageError marks a mistake in how scadactl was called.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// helpShown is returned once a command's help is printed: exit 0.
type helpShown struct{}

func (helpShown) Error() string { return "help shown" }

// isHelp reports whether args ask for a command's help and nothing else.
func isHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help")
}

// refusedError marks an operation the operator declined or a precondition
// that did not hold locally.
type refusedError struct{ msg string }

func (e refusedError) Error() string { return e.msg }

// globals are the flags every command accepts.
type globals struct {
	endpoints string
	certsDir  string
	caFile    string
	certFile  string
	keyFile   string
	output    string
	timeout   time.Duration
	yes       bool
	stdin     io.Reader
	stdout    io.Writer
	stderr    io.Writer
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, g *globals, args []string) error
}

func commands() []command {
	return []command{
		{"status", "show the answering node and the cluster", runStatus},
		{"version", "scadactl's version and every node's (release, revision, FSM feature level)", runVersion},
		{"members", "members list | add ID RAFT_ADDR [--nonvoter] | remove ID", runMembers},
		{"failover", "move the Active role: failover [--to NODE]", runFailover},
		{"override", "make the answering node sole voter (lone-survivor recovery)", runOverride},
		{"snapshot", "snapshot save FILE [--local] | restore FILE | inspect FILE", runSnapshot},
		{"deploy", "deploy push FILE [--expect-revision N] [-m MESSAGE] | rollback [--to REV] | history | diff REV1 REV2 | status", runDeploy},
		{"sf", sfUsage + " (store-and-forward buffer)", runSF},
		{"audit", "show the audit log", runAudit},
		{"check", "check [--all]: the cross-node state checkpoints (each node's digest at one index, and the verdict)", runCheck},
		{"certs", "certs init --dir DIR --nodes a,b,witness [--clients operator] [--site NAME] [--days N] [--ca-days N] [--overwrite] | issue --dir DIR --name NAME [--client --role viewer|operator|admin|producer [--targets T,...]] [--san HOST,...] [--days N] [--overwrite] | revoke SERIAL|FILE [--reason TEXT] | list --dir DIR", runCerts},
		{"tokens", tokensUsage + " (bearer tokens for producers over HTTPS)", runTokens},
		{"alarms", alarmsUsage + " (the replicated alarm state)", runAlarms},
		{"opcua", "opcua pick URL,URL | watch URL,URL NODEID (a client that follows the highest ServiceLevel) | client-cert (an application certificate for secure endpoints) | trust add|list|remove|rejected|import (the replicated trust store) | users set|list|remove (replicated user names)", runOPCUA},
		{"completion", "completion bash|zsh: a shell completion script (source <(scadactl completion bash))", runCompletion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("scadactl", flag.ContinueOnError)
	g.register(fs)
	// Help asked for is the answer (stdout, exit 0); help after a mistake
	// goes with the error (stderr, exit 2).
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: scadactl [global flags] COMMAND [args]\n       scadactl help [COMMAND [SUBCOMMAND]]\n\ncommands:\n")
		for _, c := range commands() {
			fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
		}
		fmt.Fprintf(w, "\nglobal flags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "scadactl: %v\n", err)
		usage(stderr)
		return exitUsage
	}
	if fs.NArg() == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		// help [COMMAND [SUBCOMMAND]] is the -h of what it names.
		if len(rest) == 0 {
			usage(stdout)
			return exitOK
		}
		name, rest = rest[0], append(rest[1:], "-h")
	}
	for _, c := range commands() {
		if c.name == name {
			if isHelp(rest) {
				fmt.Fprintf(stdout, "usage: scadactl [global flags] %s\n  %s\n", c.name, c.summary)
				if strings.Contains(c.summary, "|") {
					fmt.Fprintf(stdout, "scadactl %s SUBCOMMAND -h lists a subcommand's flags.\n", c.name)
				}
				fmt.Fprintf(stdout, "Global flags may also follow the command; scadactl -h lists them.\n")
				return exitOK
			}
			return report(stderr, c.run(ctx, g, rest))
		}
	}
	fmt.Fprintf(stderr, "scadactl: unknown command %q (run scadactl -h)\n", name)
	return exitUsage
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.endpoints, "endpoints", envOr("SCADACTL_ENDPOINTS", "127.0.0.1:7201"), "comma-separated control API addresses of the nodes (env SCADACTL_ENDPOINTS)")
	fs.StringVar(&g.certsDir, "certs", envOr("SCADACTL_CERTS", ""), "folder with ca.crt, operator.crt and operator.key (env SCADACTL_CERTS)")
	fs.StringVar(&g.caFile, "cacert", "", "site CA certificate (overrides --certs)")
	fs.StringVar(&g.certFile, "cert", "", "client certificate (overrides --certs)")
	fs.StringVar(&g.keyFile, "key", "", "client key (overrides --certs)")
	fs.StringVar(&g.output, "output", "table", "output format: table or json")
	fs.StringVar(&g.output, "o", "table", "short for --output")
	fs.StringVar(&g.output, "w", "table", "short for --output (etcdctl's --write-out)")
	fs.DurationVar(&g.timeout, "timeout", 5*time.Second, "how long to try to reach a node (and, for sf enqueue, to get its answer)")
	fs.BoolVar(&g.yes, "yes", false, "answer yes to confirmations")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// report prints err and maps it to an exit code.
func report(stderr io.Writer, err error) int {
	if err == nil || errors.Is(err, helpShown{}) {
		return exitOK
	}
	fmt.Fprintf(stderr, "scadactl: %v\n", err)
	var ue usageError
	var re refusedError
	var ur unreachableError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &re):
		return exitRefused
	case errors.As(err, &ur):
		return exitUnreachable
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.FailedPrecondition, codes.Aborted, codes.AlreadyExists, codes.PermissionDenied, codes.ResourceExhausted:
			return exitRefused
		case codes.NotFound:
			return exitNotFound
		case codes.InvalidArgument:
			return exitUsage
		case codes.Unavailable, codes.DeadlineExceeded:
			return exitUnreachable
		}
	}
	return exitFailed
}

// confirm asks a yes/no question on stdin unless --yes was given.
func (g *globals) confirm(question string) error {
	if g.yes {
		return nil
	}
	fmt.Fprintf(g.stderr, "%s [y/N] ", question)
	var answer string
	if _, err := fmt.Fscanln(g.stdin, &answer); err != nil {
		return refusedError{"not confirmed (no answer; pass --yes to skip the question)"}
	}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return refusedError{"not confirmed"}
	}
	return nil
}

// printOut writes v as JSON, or calls table to render it for people.
func (g *globals) printOut(v any, table func(w *tabwriter.Writer)) error {
	switch g.output {
	case "json":
		// A nil slice (nothing listed) is an empty list, not null.
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
			v = reflect.MakeSlice(rv.Type(), 0, 0).Interface()
		}
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "table":
		w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		table(w)
		return w.Flush()
	default:
		return usagef("--output %q is not one of table, json", g.output)
	}
}

// parseFlags parses a subcommand's own flags; positional arguments may come
// before or after them, and so may the global flags (`sf discard ID --yes`
// works as `--yes sf discard ID` does). -h prints the subcommand's flags.
func (g *globals) parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	own := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { own[f.Name] = true })
	// Registering writes each flag's default into g: put back what the
	// flags before the command set, which a flag given again here replaces.
	given := *g
	global := flag.NewFlagSet("", flag.ContinueOnError)
	g.register(global)
	*g = given
	global.VisitAll(func(f *flag.Flag) {
		if !own[f.Name] {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				g.subcommandHelp(fs, own)
				return nil, helpShown{}
			}
			if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
				return nil, usagef("%s takes no --%s (scadactl %s -h lists its flags)", fs.Name(), strings.TrimLeft(name, "-"), fs.Name())
			}
			return nil, usagef("%s: %v (scadactl %s -h lists its flags)", fs.Name(), err, fs.Name())
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	return positional, nil
}

// subcommandHelp prints a subcommand's own flags (own) on stdout (help
// asked for is the answer), then notes the global ones.
func (g *globals) subcommandHelp(fs *flag.FlagSet, own map[string]bool) {
	fmt.Fprintf(g.stdout, "usage: scadactl %s [flags] [args]\n", fs.Name())
	for _, c := range commands() {
		if strings.HasPrefix(fs.Name(), c.name) {
			fmt.Fprintf(g.stdout, "  %s\n", c.summary)
		}
	}
	fmt.Fprintf(g.stdout, "\nflags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		if !own[f.Name] {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		fmt.Fprintf(g.stdout, "  %s%s %s\n    \t%s", dash, f.Name, name, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			fmt.Fprintf(g.stdout, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(g.stdout)
	})
	fmt.Fprintf(g.stdout, "\nglobal flags (--endpoints, --certs, --output/-o/-w, --timeout, --yes, ...) may come before or after the command; scadactl -h lists them\n")
}

// flagGiven reports whether the flag called name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
