package main

import (
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
