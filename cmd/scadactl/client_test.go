package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRPCErrorNamesTheOperationOnce(t *testing.T) {
	for _, tc := range []struct {
		what, msg string
		want      string
	}{
		{"deploy rollback", "deploy rollback: nothing has been deployed yet", "deploy rollback: nothing has been deployed yet (NotFound)"},
		{"sf stats", "no leader known", "sf stats: no leader known (NotFound)"},
		{"deploy", "deploy rollback: x", "deploy: deploy rollback: x (NotFound)"},
	} {
		if got := rpcErr(tc.what, status.Error(codes.NotFound, tc.msg)).Error(); got != tc.want {
			t.Errorf("rpcErr(%q, %q) = %q, want %q", tc.what, tc.msg, got, tc.want)
		}
	}
}

// Each sf subcommand lists and takes only its own flags: a flag meant for
// another subcommand is refused before any node is asked.
func TestSFSubcommandFlags(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		want, omit string
	}{
		{[]string{"sf", "retry", "-h"}, 0, "--all", "--data"},
		{[]string{"sf", "stats", "-h"}, 0, "--local", "--parked"},
		{[]string{"sf", "enqueue", "-h"}, 0, "--data", "--limit"},
		{[]string{"sf", "list", "-h"}, 0, "--limit", "--id"},
		{[]string{"sf", "stats", "--parked"}, 2, "-parked", ""},
		{[]string{"sf", "enqueue", "sink", "--all"}, 2, "-all", ""},
		{[]string{"sf", "bogus"}, 2, `unknown subcommand "bogus"`, ""},
	} {
		var out, errs strings.Builder
		code := run(context.Background(), append([]string{"--endpoints", "127.0.0.1:1"}, tc.args...), strings.NewReader(""), &out, &errs)
		got := out.String() + errs.String()
		_, flags, _ := strings.Cut(got, "flags:") // the usage line above names every subcommand's
		if code != tc.code || !strings.Contains(got, tc.want) || (tc.omit != "" && strings.Contains(flags, tc.omit)) {
			t.Errorf("scadactl %s: exit %d, %q; want exit %d showing %q and not %q", strings.Join(tc.args, " "), code, got, tc.code, tc.want, tc.omit)
		}
	}
}
