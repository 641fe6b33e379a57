package main

import (
	"errors"
	"testing"

	"github.com/scadad/scadad/api/controlpb"
)

func TestLeaderLag(t *testing.T) {
	st := &controlpb.StatusResponse{AppliedIndex: 100, LeaderApiAddr: "10.0.0.2:7201"}
	for _, tc := range []struct {
		name string
		lead *controlpb.StatusResponse
		err  error
		want string
	}{
		{"caught up", &controlpb.StatusResponse{CommitIndex: 100}, nil, "100 (this node has applied all of it)"},
		{"leader's commit not yet applied here", &controlpb.StatusResponse{CommitIndex: 5210}, nil, "5210 (this node is 5110 entries behind)"},
		{"ahead of a leader that restarted", &controlpb.StatusResponse{CommitIndex: 90}, nil, "90 (this node has applied all of it)"},
		{"leader not answering", nil, errors.New("context deadline exceeded"), "unknown (leader 10.0.0.2:7201: context deadline exceeded)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaderLag(st, tc.lead, tc.err); got != tc.want {
				t.Fatalf("leaderLag = %q, want %q", got, tc.want)
			}
		})
	}
}
