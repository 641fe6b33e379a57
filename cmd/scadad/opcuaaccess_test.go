package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock/clocktest"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/promtest"
	"github.com/scadad/scadad/internal/testwait"
)

type fixedAccess struct{ acc *fsm.Access }

func (f fixedAccess) Access() *fsm.Access { return f.acc }

// refusingLeader answers every proposal with err, as a leader whose
// rejected list is full does (or, err a transport error, none at all).
type refusingLeader struct {
	calls atomic.Int64
	err   error
}

func (l *refusingLeader) Propose(context.Context, *fsmpb.Command) (*fsm.Result, error) {
	l.calls.Add(1)
	return &fsm.Result{Err: l.err}, nil
}

// logLines counts the lines of a log written while the code runs.
func logLines(b *lockedbuf.Buffer) int { return strings.Count(b.String(), "\n") }

// reports is the node's count of refusals whose report ended as result.
func reports(t *testing.T, reg prometheus.Gatherer, result string) float64 {
	t.Helper()
	v, _, err := promtest.Value(reg, "scadad_opcua_trust_rejections_total", result)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func refusedClientCerts(t *testing.T, n int) []*x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	certs := make([]*x509.Certificate, n)
	for i := range certs {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: fmt.Sprint("hmi-", i)},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		if certs[i], err = x509.ParseCertificate(der); err != nil {
			t.Fatal(err)
		}
	}
	return certs
}

// A client presenting a thousand certificates, or one certificate over
// and over, must not make a node propose and warn without end when the
// rejected list is full or the leader refuses the reports: before, every
// refusal was one proposal and one warning (1,000 and 1,000 here).
func TestOPCUARefusalReportsAreBoundedAndRateLimited(t *testing.T) {
	certs := refusedClientCerts(t, 1000)
	fullList := &fsm.Access{OPCUARejected: map[string]fsm.OPCUARejectedCert{}}
	for i := 0; i < fsm.MaxOPCUARejected; i++ {
		fullList.OPCUARejected[fmt.Sprint("other-", i)] = fsm.OPCUARejectedCert{}
	}
	listFull := errors.New("the rejected OPC UA certificates list is full (100)")
	for _, tc := range []struct {
		name          string
		state         *fsm.Access
		leader        error
		maxProposals  int64
		wantLeftOffAs string
	}{
		// The node sees the full list itself: nothing to propose.
		{"list full in the replicated state", fullList, listFull, 0, rejectionListFull},
		// The node's state lags (a Standby) or the leader refuses for
		// another reason: the bucket's burst, then one per 5 s.
		{"leader refuses every report", &fsm.Access{}, listFull, rejectionBurst, rejectionRateLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := &refusingLeader{err: tc.leader}
			logs := &lockedbuf.Buffer{}
			clk := clocktest.New(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
			reg := prometheus.NewRegistry()
			a, err := newOPCUAAccess("node-a", fixedAccess{tc.state}, leader, zerolog.New(logs), reg, clk)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = a.run(ctx) }()
			accounted := func() int {
				n := 0
				for _, r := range []string{rejectionRecorded, rejectionListFull, rejectionRateLimit, rejectionQueueFull, rejectionProposeErr} {
					n += int(reports(t, reg, r))
				}
				return n
			}
			refuse := func(c *x509.Certificate, done int) {
				a.Rejected(c, "not trusted")
				testwait.For(t, 5*time.Second, "the refusal accounted for", func() bool { return accounted() >= done })
			}
			// A thousand distinct certificates in 100 s of fake time.
			for i, c := range certs {
				refuse(c, i+1)
				clk.Advance(100 * time.Millisecond)
			}
			// One certificate, refused every second for 100 s.
			for i := 0; i < 100; i++ {
				refuse(certs[0], len(certs)+i+1)
				clk.Advance(time.Second)
			}
			// 200 s of fake time: the burst and at most 40 refills.
			maxProposals := tc.maxProposals
			if maxProposals > 0 {
				maxProposals += int64(200 * time.Second / rejectionEvery)
			}
			if got := leader.calls.Load(); got > maxProposals {
				t.Errorf("%d proposals for 1,100 refusals over 200 s, want at most %d", got, maxProposals)
			}
			// One warning per minute: 200 s is four at most.
			if got := logLines(logs); got > 4 || got < 1 {
				t.Errorf("%d log lines over 200 s, want 1 to 4:\n%s", got, logs.String())
			}
			if n := reports(t, reg, tc.wantLeftOffAs); n < 900 {
				t.Errorf("%s counted %v refusals, want most of the 1,100", tc.wantLeftOffAs, n)
			}
			if !strings.Contains(logs.String(), "scadactl opcua trust remove") {
				t.Errorf("the warning does not say how to make room:\n%s", logs.String())
			}
		})
	}
}

// Under the bound, each refused certificate is proposed once and recorded.
func TestOPCUARefusalReportedOnceWhileTheListHasRoom(t *testing.T) {
	certs := refusedClientCerts(t, 3)
	leader := &refusingLeader{}
	clk := clocktest.New(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC))
	logs := &lockedbuf.Buffer{}
	reg := prometheus.NewRegistry()
	a, err := newOPCUAAccess("node-a", fixedAccess{&fsm.Access{}}, leader, zerolog.New(logs), reg, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.run(ctx) }()
	for i := 0; i < 3; i++ {
		for _, c := range certs {
			a.Rejected(c, "not trusted")
		}
	}
	testwait.For(t, 5*time.Second, "three reports recorded", func() bool {
		return reports(t, reg, rejectionRecorded) == 3
	})
	if got := leader.calls.Load(); got != 3 || logLines(logs) != 0 {
		t.Errorf("%d proposals and %d log lines for three certificates refused three times each, want 3 and 0", got, logLines(logs))
	}
}
