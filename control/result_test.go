package control

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/fsm"
)

func TestResultRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		in       *fsm.Result
		wantCode fsm.Code
		storage  bool
	}{
		{"ok enqueue", &fsm.Result{Index: 7, Enqueue: &fsm.EnqueueOutcome{Added: 2, Items: []fsm.EnqueueItem{{ID: "a", Seq: 1}, {ID: "b", Duplicate: true}}}}, "", false},
		{"deterministic refusal", &fsm.Result{Index: 8, Err: &fsm.CommandError{Code: fsm.CodeRevisionMismatch, Message: "expected 3, at 4"}}, fsm.CodeRevisionMismatch, false},
		{"storage failure", &fsm.Result{Index: 9, Err: errors.New("disk full")}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wire, err := encodeResult(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := decodeResult(wire)
			if err != nil {
				t.Fatal(err)
			}
			if out.Index != tt.in.Index {
				t.Fatalf("index %d, want %d", out.Index, tt.in.Index)
			}
			switch {
			case tt.wantCode != "":
				var ce *fsm.CommandError
				if !errors.As(out.Err, &ce) || ce.Code != tt.wantCode || !errors.Is(out.Err, fsm.ErrRevisionMismatch) {
					t.Fatalf("err = %v, want a %s CommandError that errors.Is matches", out.Err, tt.wantCode)
				}
			case tt.storage:
				var ce *fsm.CommandError
				if out.Err == nil || errors.As(out.Err, &ce) {
					t.Fatalf("err = %v, want a non-deterministic storage error", out.Err)
				}
			default:
				if out.Err != nil || out.Enqueue == nil || out.Enqueue.Added != 2 || !out.Enqueue.Items[1].Duplicate {
					t.Fatalf("outcome did not survive the trip: %+v", out)
				}
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "no leader"), true},
		{status.Error(codes.DeadlineExceeded, "slow"), true},
		{status.Error(codes.PermissionDenied, "not a member"), false},
		{status.Error(codes.InvalidArgument, "bad"), false},
		{errors.New("plain"), false},
	}
	for _, tt := range tests {
		if got := retryable(tt.err); got != tt.want {
			t.Errorf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
