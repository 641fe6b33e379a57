//go:build unix

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/pki"
)

type bench struct {
	c    *testcluster.Cluster
	o    options
	sink *testcluster.Sink
	pg   *testcluster.Postgres  // -deliver-kind postgres
	mq   *testcluster.Mosquitto // -deliver-kind mqtt
	tls  *tls.Config
	// stats is the one connection the drain polls over: a new TLS
	// handshake every poll would load the machine being measured.
	stats *client
	// httpTLS and bearer are what -http-auth token's clients use: the
	// site CA, and the token's Authorization header value.
	httpTLS *tls.Config
	bearer  string
}

// setup deploys a site config whose target "bench" is a recording sink that
// refuses everything until the deliver phase, so the write phases measure
// the replicated enqueue path, not delivery.
func (b *bench) setup() error {
	conf, err := pki.LoadClientTLS(filepath.Join(b.c.Certs, "ca.crt"), filepath.Join(b.c.Certs, "operator.crt"), filepath.Join(b.c.Certs, "operator.key"))
	if err != nil {
		return err
	}
	b.tls = conf
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.c.WaitOneActive(ctx); err != nil {
		return err
	}
	b.sink, err = testcluster.StartSink(b.c.Bin, b.c.Dir, fmt.Sprintf("-fsync=%v", b.o.sinkFsync))
	if err != nil {
		return err
	}
	// -deliver-mode live measures delivery as the producers enqueue: the
	// receivers accept from the start, with the usual short backoff; with
	// -deliver-backlog they refuse until the backlog is filled, and the
	// short backoff has delivery resume within 200 ms of their return.
	live := b.o.deliverMode == "live"
	accepting := live && b.o.deliverBacklog == 0
	if err := b.sink.SetFailing(!accepting); err != nil {
		return err
	}
	site := testcluster.SiteConfig("bench", map[string]string{"bench": b.sink.URL}, 0)
	if b.o.deliverKind == "postgres" {
		if b.pg, err = testcluster.StartPostgres(b.c.Dir); err != nil {
			return err
		}
		if !accepting {
			b.pg.Stop() // refusing (down) until the deliver phase
		}
		site = []byte(string(testcluster.SiteConfig("bench", nil, 0)) + fmt.Sprintf(
			"  - {name: bench, kind: postgres, postgres: {dsn: %q, password_file: %q, table: bench}, timeout: 10s, backoff_floor: 20ms, backoff_max: 200ms, max_attempts: 0, max_payload_bytes: 65536}\n",
			b.pg.DSN, b.pg.PasswordFile))
	}
	if b.o.deliverKind == "mqtt" {
		if b.mq, err = testcluster.StartMosquittoWith(b.c.Dir, testcluster.MosquittoOptions{ReceiveMaximum: b.o.mqttReceiveMaximum}); err != nil {
			return err
		}
		if !accepting {
			b.mq.Stop() // refusing (down) until the deliver phase
		}
		// MQTT 3.1.1 has no user properties: the id travels in the topic.
		topic, protocol := "bench/{target}", ""
		if b.o.mqttProtocol == "3.1.1" {
			topic, protocol = "bench/{target}/{id}", `protocol: "3.1.1", `
		}
		site = []byte(string(testcluster.SiteConfig("bench", nil, 0)) + fmt.Sprintf(
			"  - {name: bench, kind: mqtt, mqtt: {broker: %q, %stopic: %q, username: scadad, password_file: %q}, timeout: 10s, backoff_floor: 20ms, backoff_max: 200ms, max_attempts: 0, max_payload_bytes: 65536}\n",
			b.mq.URL, protocol, topic, b.mq.PasswordFile))
	}
	if !live {
		// A long backoff: refused deliveries during the write phases stay rare.
		site = []byte(strings.Replace(string(site), "backoff_floor: 20ms, backoff_max: 200ms", "backoff_floor: 30s, backoff_max: 30s", 1))
	}
	site = []byte(strings.Replace(string(site), "max_payload_bytes: 65536}", fmt.Sprintf("max_payload_bytes: 65536, max_in_flight: %d, batch_max_messages: %d}", b.o.deliverInFlight, b.o.deliverBatch), 1))
	file := filepath.Join(b.c.Dir, "site.yaml")
	if err := os.WriteFile(file, site, 0o644); err != nil {
		return err
	}
	if _, errs, code, err := b.c.Ctl(ctx, nil, "deploy", "push", file); err != nil || code != 0 {
		return fmt.Errorf("deploy push: exit %d: %s %v", code, errs, err)
	}
	if b.o.httpAuth == "token" {
		out, errs, code, err := b.c.Ctl(ctx, nil, "tokens", "create", "--name", "bench-feed", "--targets", "bench")
		if err != nil || code != 0 {
			return fmt.Errorf("tokens create: exit %d: %s %v", code, errs, err)
		}
		b.bearer = "Bearer " + strings.TrimSpace(out)
		ca, err := os.ReadFile(filepath.Join(b.c.Certs, "ca.crt"))
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return fmt.Errorf("%s: no CA certificate", filepath.Join(b.c.Certs, "ca.crt"))
		}
		b.httpTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	}
	return testwait.Poll(ctx, func() bool {
		cli, err := b.client(b.c.Nodes[0])
		if err != nil {
			return false
		}
		defer cli.Close()
		return cli.enqueue(ctx, fmt.Sprintf("setup-%d", time.Now().UnixNano()), []byte("x")) == nil
	})
}

func (b *bench) leader() (*testcluster.Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return b.c.WaitOneActive(ctx)
}

// settledLeader waits for one Active, lets the cluster idle for -settle,
// and returns the Active then.
func (b *bench) settledLeader() (*testcluster.Node, error) {
	if _, err := b.leader(); err != nil {
		return nil, err
	}
	time.Sleep(b.o.settle)
	return b.leader()
}

// pending reads the buffer's pending count from a voter's replica.
func (b *bench) pending(ctx context.Context) (uint64, error) {
	if b.stats == nil {
		cli, err := b.client(b.c.Nodes[0])
		if err != nil {
			return 0, err
		}
		b.stats = cli
	}
	resp, err := b.stats.api.SFStats(ctx, &controlpb.SFStatsRequest{})
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, s := range resp.Targets {
		n += s.Pending
	}
	return n, nil
}

// profile starts a CPU profile of up to d on every running node when
// -cpuprofile is set; the returned func waits for them to be written.
func (b *bench) profile(name string, d time.Duration) func() {
	if b.o.cpuProfile == "" {
		return func() {}
	}
	secs := max(1, int(d.Seconds()))
	var wg sync.WaitGroup
	for _, n := range b.c.Nodes {
		if !n.Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(b.o.cpuProfile, name+"-"+n.ID+".pprof")
			// -http-auth token serves the nodes' HTTP listener over TLS,
			// where profiles need credentials: the operator's certificate.
			scheme, tr := "http", &http.Transport{}
			if b.httpTLS != nil {
				scheme, tr.TLSClientConfig = "https", b.tls
			}
			cl := &http.Client{Timeout: time.Duration(secs+30) * time.Second, Transport: tr}
			resp, err := cl.Get(fmt.Sprintf("%s://%s/debug/pprof/profile?seconds=%d", scheme, n.HTTPAddr, secs))
			if err != nil {
				fmt.Fprintf(os.Stderr, "scadabench: profile %s: %v\n", n.ID, err)
				return
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode == http.StatusOK {
				err = os.WriteFile(path, data, 0o644)
			} else if err == nil {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "scadabench: profile %s: %v\n", n.ID, err)
			}
		}()
	}
	return wg.Wait
}
