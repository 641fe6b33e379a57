package main

import (
	"errors"
	"testing"
	"time"

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

func TestCertificatesLine(t *testing.T) {
	now := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	day := int64(24 * 3600)
	cases := []struct {
		name     string
		cert, ca int64
		want     string
	}{
		{"far off", now.Unix() + 400*day, now.Unix() + 3000*day, "node until 2028-04-04 (400 days), site CA until 2035-05-18 (3000 days)"},
		{"node within 30 days", now.Unix() + 12*day, now.Unix() + 3000*day, "node until 2027-03-13 (EXPIRES IN 12 DAYS: see docs/operations.md, Renewing certificates), site CA until 2035-05-18 (3000 days)"},
		{"CA lapsed", now.Unix() + 400*day, now.Unix() - day, "node until 2028-04-04 (400 days), site CA EXPIRED 2027-02-28"},
		{"unknown", 0, now.Unix() + 3000*day, "node unknown, site CA until 2035-05-18 (3000 days)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := certificates(tc.cert, tc.ca, now); got != tc.want {
				t.Fatalf("certificates = %q, want %q", got, tc.want)
			}
		})
	}
}
