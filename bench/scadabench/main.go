//go:build unix

// Command scadabench measures scadad the way ../shared/tools/etcdbench
// measures etcd, so the two can be put side by side from one sitting:
//
//   - write: C concurrent clients (one gRPC connection each, -conns to
//     share, as etcdbench) enqueue unique
//     store-and-forward messages of V bytes through the control API of the
//     leader (-target all spreads them over the voters) for D seconds after
//     a 1 s warm-up; acknowledged enqueues/s, p50/p99/max. An enqueue is
//     acknowledged only once it is committed on a quorum, fsync on.
//   - failover: K times, wait until the cluster is healthy and idle, SIGKILL
//     the Active node's process, and time until an enqueue through the
//     survivors is acknowledged (a fresh probe every -probe-interval).
//   - deliver: N messages are enqueued while the sink refuses them, then the
//     sink recovers and the time until the buffer is empty gives messages/s.
//
// The cluster is real scadad processes on 127.0.0.1 (two voters + witness
// by default), built from this tree. Output: one human-readable line per
// run, then one JSON line with all figures.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gopcua/opcua/ua"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/grpcdial"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/opcua"
	"github.com/scadad/scadad/pki"
	"github.com/scadad/scadad/siteconfig"
	"github.com/scadad/scadad/uasec"
)

type options struct {
	mode, target, phases, extra  string
	ids                          string
	api, httpClient, httpAuth    string
	voters, failovers, count     int
	stall                        time.Duration
	conns                        int
	deliverN, deliverInFlight    int
	deliverBatch                 int
	deliverKind                  string
	witness, keep, sinkFsync     bool
	pprof                        bool
	cpuProfile                   string
	bufferN, bufferSize          int
	clients, sizes               []int
	duration, warmup, probeEvery time.Duration
	probeTimeout, settle, foMax  time.Duration
}

type writeResult struct {
	Clients    int     `json:"clients"`
	ValueBytes int     `json:"value_bytes"`
	Target     string  `json:"target"`
	API        string  `json:"api"`
	Seconds    float64 `json:"seconds"`
	Puts       int     `json:"puts"`
	Errors     int64   `json:"errors"`
	PutsPerSec float64 `json:"puts_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
}

type failoverResult struct {
	RunsMs   []float64 `json:"runs_ms"`
	Failed   int       `json:"failed"`
	MinMs    float64   `json:"min_ms"`
	MedianMs float64   `json:"median_ms"`
	MaxMs    float64   `json:"max_ms"`
}

// stallResult: how many SIGSTOPs of the Active for -stall the cluster rode
// out (the same node Active afterwards, in the same term).
type stallResult struct {
	StallMs    float64  `json:"stall_ms"`
	Runs       int      `json:"runs"`
	RodeOut    int      `json:"rode_out"`
	FailedOver []string `json:"failed_over,omitempty"`
}

type deliverResult struct {
	Messages  int     `json:"messages"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_s"`
}

type deployResult struct {
	ArtifactBytes  int     `json:"artifact_bytes"`
	Tags           int     `json:"tags"`
	PushToAllMs    float64 `json:"push_to_all_applied_ms"`
	OneTagToAllMs  float64 `json:"one_tag_change_to_all_applied_ms"`
	OneTagPushMs   float64 `json:"one_tag_change_push_ms"`
	ChangedEntries int     `json:"one_tag_change_diff_entries"`
}

type bufferResult struct {
	Messages     int     `json:"messages"`
	PayloadBytes int     `json:"payload_bytes"`
	FillSeconds  float64 `json:"fill_seconds"`
	RSSMiB       []int   `json:"rss_mib"`      // per node, after the fill
	RSSPeakMiB   []int   `json:"rss_peak_mib"` // per node, the largest 1 s sample during the fill
	RSSAnonMiB   []int   `json:"rss_anon_mib"` // heap and stacks, without the mapped state file
	// RSSFileMiB is, per node, the resident pages of each mapped file
	// (by base name), from /proc/PID/smaps.
	RSSFileMiB      []map[string]int `json:"rss_file_mib"`
	RSSRestartMiB   []int            `json:"rss_after_restart_mib"` // per node, once the restarted cluster is Active
	FSMFileMiB      int              `json:"fsm_file_mib"`
	RestartToActive float64          `json:"restart_all_to_active_s"`
	PendingAfter    uint64           `json:"pending_after_restart"`
	CatchUpSeconds  float64          `json:"wiped_follower_catch_up_s"`
}

type serviceLevelResult struct {
	RunsMs   []float64 `json:"runs_ms"`
	Failed   int       `json:"failed"`
	MinMs    float64   `json:"min_ms"`
	MedianMs float64   `json:"median_ms"`
	MaxMs    float64   `json:"max_ms"`
	// Field data: until the survivor serves a Good value of a gateway tag
	// with a source timestamp after the kill.
	DataRunsMs   []float64 `json:"data_runs_ms"`
	DataFailed   int       `json:"data_failed"`
	DataMinMs    float64   `json:"data_min_ms"`
	DataMedianMs float64   `json:"data_median_ms"`
	DataMaxMs    float64   `json:"data_max_ms"`
	// Gap: what a failover-following client (scadactl opcua watch)
	// reports between the last value notification from the killed
	// Active and the first from the survivor.
	GapRunsMs   []float64 `json:"gap_runs_ms"`
	GapFailed   int       `json:"gap_failed"`
	GapMinMs    float64   `json:"gap_min_ms"`
	GapMedianMs float64   `json:"gap_median_ms"`
	GapMaxMs    float64   `json:"gap_max_ms"`
}

type report struct {
	System   string          `json:"system"`
	Go       string          `json:"go"`
	Mode     string          `json:"mode"`
	Members  int             `json:"members"`
	NumCPU   int             `json:"cpus"`
	Write    []writeResult   `json:"write"`
	Failover *failoverResult `json:"failover,omitempty"`
	Stall    *stallResult    `json:"stall,omitempty"`
	Deliver  *deliverResult  `json:"deliver,omitempty"`
	Deploy   *deployResult   `json:"deploy,omitempty"`
	Buffer   *bufferResult   `json:"buffer,omitempty"`
	// ServiceLevel is the OPC UA failover: SIGKILL of the Active until the
	// survivor's ServiceLevel 250 is readable by a client.
	ServiceLevel *serviceLevelResult `json:"service_level,omitempty"`
}

func main() {
	o := parseFlags()
	bin, err := testcluster.Build()
	if err != nil {
		fatalf("build: %v", err)
	}
	defer bin.Remove()
	c, err := testcluster.New(bin, testcluster.Options{Mode: o.mode, Voters: o.voters, Witness: o.witness, LogLevel: "warn", Extra: o.extra, Pprof: o.pprof, HTTPTLS: o.httpAuth == "token", OPCUA: strings.Contains(o.phases, "servicelevel")})
	if err != nil {
		fatalf("cluster: %v", err)
	}
	defer func() {
		c.Close()
		if o.keep {
			fmt.Println("kept", c.Dir)
		}
	}()
	stopCluster := func() {
		c.Close()
		bin.Remove()
	}
	atExit.set(stopCluster)
	exitOnSignal()
	if err := c.StartAll(); err != nil {
		fatalf("%v", err)
	}
	b := &bench{c: c, o: o}
	if err := b.setup(); err != nil {
		fatalf("setup: %v", err)
	}
	defer b.sink.Close()
	atExit.set(func() {
		b.sink.Close()
		stopCluster()
	})

	rep := report{System: "scadad", Go: runtime.Version(), Mode: o.mode, Members: len(c.Nodes), NumCPU: runtime.NumCPU(), Write: []writeResult{}}
	fmt.Printf("scadabench: scadad, %s, mode=%s, members=%d (witness=%v), fsync=on, cpus=%d, data=%s\n", rep.Go, o.mode, len(c.Nodes), o.witness, rep.NumCPU, c.Dir)
	if strings.Contains(o.phases, "write") {
		for _, size := range o.sizes {
			for _, n := range o.clients {
				r, err := b.writePhase(n, size)
				if err != nil {
					fatalf("write phase: %v", err)
				}
				rep.Write = append(rep.Write, r)
				fmt.Printf("write clients=%-3d value=%dB target=%s api=%s: %.0f enqueues/s (%d in %.1fs, %d errors) p50=%.2fms p99=%.2fms max=%.1fms\n",
					r.Clients, r.ValueBytes, r.Target, r.API, r.PutsPerSec, r.Puts, r.Seconds, r.Errors, r.P50Ms, r.P99Ms, r.MaxMs)
			}
		}
	}
	if strings.Contains(o.phases, "deliver") && o.deliverN > 0 {
		d, err := b.deliverPhase(o.deliverN)
		if err != nil {
			fatalf("deliver phase: %v", err)
		}
		rep.Deliver = d
		fmt.Printf("deliver: %d messages drained to a local %s target (sink fsync=%v, max_in_flight=%d, batch_max_messages=%d) in %.2fs: %.0f messages/s\n", d.Messages, o.deliverKind, o.sinkFsync, o.deliverInFlight, o.deliverBatch, d.Seconds, d.PerSecond)
	}
	if strings.Contains(o.phases, "deploy") {
		d, err := b.deployPhase()
		if err != nil {
			fatalf("deploy phase: %v", err)
		}
		rep.Deploy = d
		fmt.Printf("deploy: %d-byte site config (%d tags) pushed and applied on all %d nodes in %.0fms; a one-tag change (%d diff entry) in %.0fms (push %.0fms)\n",
			d.ArtifactBytes, d.Tags, len(b.c.Nodes), d.PushToAllMs, d.ChangedEntries, d.OneTagToAllMs, d.OneTagPushMs)
	}
	if strings.Contains(o.phases, "buffer") {
		r, err := b.bufferPhase(o.bufferN, o.bufferSize)
		if err != nil {
			fatalf("buffer phase: %v", err)
		}
		rep.Buffer = r
		fmt.Printf("buffer: %d pending %d-byte messages (filled in %.0fs); RSS per node %v MiB (peak during the fill %v MiB; anonymous %v MiB, mapped files %v MiB, state file %d MiB); all nodes restarted -> Active in %.2fs with %d pending, RSS then %v MiB; a wiped follower caught up in %.1fs\n",
			r.Messages, r.PayloadBytes, r.FillSeconds, r.RSSMiB, r.RSSPeakMiB, r.RSSAnonMiB, r.RSSFileMiB, r.FSMFileMiB, r.RestartToActive, r.PendingAfter, r.RSSRestartMiB, r.CatchUpSeconds)
	}
	if strings.Contains(o.phases, "servicelevel") && o.failovers > 0 {
		r, err := b.serviceLevelPhase()
		if err != nil {
			fatalf("servicelevel phase: %v", err)
		}
		rep.ServiceLevel = r
		fmt.Printf("servicelevel (%d runs, %d failed): SIGKILL of the Active -> survivor's ServiceLevel 250 read by a client: min=%.0fms median=%.0fms max=%.0fms\n", len(r.RunsMs), r.Failed, r.MinMs, r.MedianMs, r.MaxMs)
		fmt.Printf("field data (%d runs, %d failed): SIGKILL of the Active -> a Good gateway value newer than the kill read from the survivor: min=%.0fms median=%.0fms max=%.0fms\n", len(r.DataRunsMs), r.DataFailed, r.DataMinMs, r.DataMedianMs, r.DataMaxMs)
		fmt.Printf("notification gap (%d runs, %d failed): a subscribed client following the failover, last value from the killed Active -> first from the survivor: min=%.0fms median=%.0fms max=%.0fms\n", len(r.GapRunsMs), r.GapFailed, r.GapMinMs, r.GapMedianMs, r.GapMaxMs)
	}
	if strings.Contains(o.phases, "stall") && o.failovers > 0 {
		r, err := b.stallPhase()
		if err != nil {
			fatalf("stall phase: %v", err)
		}
		rep.Stall = r
		fmt.Printf("stall (%d runs): SIGSTOP of the Active for %s, then SIGCONT: rode out %d, failed over %d\n", r.Runs, o.stall, r.RodeOut, len(r.FailedOver))
	}
	if strings.Contains(o.phases, "failover") && o.failovers > 0 {
		f, err := b.failoverPhase()
		if err != nil {
			fatalf("failover phase: %v", err)
		}
		rep.Failover = f
		fmt.Printf("failover (%d runs, %d failed): min=%.0fms median=%.0fms max=%.0fms\n", len(f.RunsMs), f.Failed, f.MinMs, f.MedianMs, f.MaxMs)
	}
	js, _ := json.Marshal(rep)
	fmt.Println(string(js))
}

func parseFlags() options {
	var o options
	var clients, sizes string
	flag.StringVar(&o.mode, "mode", "witness", "cluster mode: witness (two voters + witness), pair or strict")
	flag.IntVar(&o.voters, "voters", 2, "number of voting nodes besides the witness")
	flag.BoolVar(&o.witness, "witness", true, "add a witness node")
	flag.StringVar(&clients, "clients", "1,64", "comma-separated concurrent client counts C, one write run each")
	flag.StringVar(&sizes, "value-size", "256", "comma-separated payload sizes V in bytes, one write run each")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length D of each write run (ignored when -count > 0)")
	flag.IntVar(&o.count, "count", 0, "if > 0, each write run does this many enqueues in total")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each write run")
	flag.StringVar(&o.ids, "ids", "seq", "write: message ids: seq (tag/client/n, as etcdbench's keys), random (16 random bytes in hex) or server (none: scadad generates them)")
	flag.IntVar(&o.conns, "conns", 0, "write: gRPC connections (or HTTP keep-alive connections per node) shared by the clients, as etcdbench's -conns (0 = one per client)")
	flag.StringVar(&o.target, "target", "leader", "where write clients connect: leader or all (round-robin over the voters)")
	flag.StringVar(&o.api, "api", "grpc", "how write clients enqueue: grpc (the control API's unary SFEnqueue, mutual TLS), stream (its SFEnqueueStream, one stream per connection, each client waiting for its answer) http (the node's local POST /v1/sf/TARGET) or floor (unary SFEnqueue calls without a target, which the server refuses before storing anything: the ceiling the gRPC and TLS round trip alone puts on -api grpc)")
	flag.StringVar(&o.httpAuth, "http-auth", "insecure", "-api http: insecure (the nodes run http.insecure: true, plain HTTP, no credentials) or token (HTTPS with the node's certificate, checked against the site CA, and a bearer token from scadactl tokens create limited to the bench target: the default production setup)")
	flag.StringVar(&o.httpClient, "http-client", "transport", "-api http: transport (net/http's Client and Transport) or conn (each connection written and read directly, http.ReadResponse for answers: a load generator's cost, as wrk's)")
	flag.IntVar(&o.failovers, "failovers", 5, "failover repetitions K (also the stall phase's)")
	flag.DurationVar(&o.stall, "stall", 300*time.Millisecond, "stall phase: how long the Active is stopped (SIGSTOP, then SIGCONT) in each of -failovers runs; the cluster rides it out when the same node is Active afterwards in the same term")
	flag.DurationVar(&o.probeEvery, "probe-interval", 10*time.Millisecond, "failover: start a new probe enqueue this often until one succeeds")
	flag.DurationVar(&o.probeTimeout, "probe-timeout", time.Second, "failover: timeout of each probe")
	flag.DurationVar(&o.foMax, "failover-max", 30*time.Second, "failover: give up on a run after this long")
	flag.DurationVar(&o.settle, "settle", 2*time.Second, "failover: idle time after the cluster is healthy before each kill")
	flag.IntVar(&o.deliverN, "deliver-messages", 20000, "deliver: messages to drain")
	flag.IntVar(&o.deliverInFlight, "deliver-in-flight", 1, "deliver: the target's max_in_flight (1: strict enqueue order)")
	flag.IntVar(&o.deliverBatch, "deliver-batch", 0, "deliver: the target's batch_max_messages (0: one message per delivery)")
	flag.StringVar(&o.deliverKind, "deliver-kind", "http", "deliver: the target's kind: http (a local sfsink), postgres (a PostgreSQL server of the bench's own, testcluster.StartPostgres) or mqtt (a Mosquitto of its own, QoS 1 publishes with no subscriber), the server stopped while the buffer fills")
	flag.StringVar(&o.phases, "phases", "write,deliver,deploy,failover", "phases to run")
	flag.BoolVar(&o.sinkFsync, "sink-fsync", false, "the sink fsyncs each record before it answers (a durable receiver); false answers once written")
	flag.IntVar(&o.bufferN, "buffer-messages", 1000000, "buffer: pending messages to hold")
	flag.IntVar(&o.bufferSize, "buffer-size", 1024, "buffer: payload bytes per message")
	flag.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof/ on every node's HTTP listener")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of every node during each write and deliver run into this folder (implies -pprof)")
	flag.StringVar(&o.extra, "node-config", "", "YAML merged over every node config: any field can be set, a block such as cluster: merges field by field (e.g. tuning store_forward)")
	heartbeat := flag.Int("heartbeat-ms", 0, "cluster.heartbeat_timeout in ms: how long a follower may go without hearing from the leader before it stands for election (raft's leader heartbeats every tenth of it); leader_lease_timeout becomes half of it. 0 keeps the node default. -node-config wins over it")
	election := flag.Int("election-ms", 0, "cluster.election_timeout in ms: how long a candidate waits for votes before it tries again. 0 keeps the node default. -node-config wins over it")
	flag.BoolVar(&o.keep, "keep", false, "print the data dir (it is removed anyway unless you copy it)")
	flag.Parse()
	o.extra = timingYAML(*heartbeat, *election, o.extra)
	o.clients, o.sizes = intList("clients", clients), intList("value-size", sizes)
	if o.cpuProfile != "" {
		o.pprof = true
		if err := os.MkdirAll(o.cpuProfile, 0o755); err != nil {
			fatalf("-cpuprofile: %v", err)
		}
	}
	if o.ids != "seq" && o.ids != "random" && o.ids != "server" {
		fatalf("bad -ids %q: want seq, random or server", o.ids)
	}
	if o.target != "leader" && o.target != "all" {
		fatalf("bad -target %q", o.target)
	}
	if o.httpAuth != "insecure" && o.httpAuth != "token" {
		fatalf("bad -http-auth %q: want insecure or token", o.httpAuth)
	}
	if o.httpClient != "transport" && o.httpClient != "conn" {
		fatalf("bad -http-client %q: want transport or conn", o.httpClient)
	}
	if o.api != "grpc" && o.api != "stream" && o.api != "http" && o.api != "floor" {
		fatalf("bad -api %q: want grpc, stream, http or floor", o.api)
	}
	return o
}

// timingYAML puts the benchmark's connection bound and -heartbeat-ms and
// -election-ms under -node-config's YAML, which is merged over them so an
// explicit field wins.
func timingYAML(heartbeatMs, electionMs int, extra string) string {
	if heartbeatMs < 0 || electionMs < 0 {
		fatalf("-heartbeat-ms %d and -election-ms %d must not be negative", heartbeatMs, electionMs)
	}
	var b strings.Builder
	// Every benchmark client dials from 127.0.0.1, and so does the peer
	// that forwards to the leader: the control API's per-address bound
	// (64 by default, sized for a site's many hosts) would refuse a
	// 64-client run's connections, so here it is the listener's total.
	b.WriteString("api:\n  max_connections_per_address: 256\n")
	if heartbeatMs > 0 || electionMs > 0 {
		b.WriteString("cluster:\n")
	}
	if heartbeatMs > 0 {
		hb := time.Duration(heartbeatMs) * time.Millisecond
		fmt.Fprintf(&b, "  heartbeat_timeout: %s\n  leader_lease_timeout: %s\n", hb, hb/2)
	}
	if electionMs > 0 {
		fmt.Fprintf(&b, "  election_timeout: %s\n", time.Duration(electionMs)*time.Millisecond)
	}
	merged, err := testcluster.MergeYAML(b.String(), extra)
	if err != nil {
		fatalf("-node-config: %v", err)
	}
	return merged
}

func intList(name, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fatalf("bad -%s %q", name, s)
		}
		out = append(out, n)
	}
	return out
}

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
	if err := b.sink.SetFailing(true); err != nil {
		return err
	}
	site := testcluster.SiteConfig("bench", map[string]string{"bench": b.sink.URL}, 0)
	if b.o.deliverKind == "postgres" {
		if b.pg, err = testcluster.StartPostgres(b.c.Dir); err != nil {
			return err
		}
		b.pg.Stop() // refusing (down) until the deliver phase
		site = []byte(string(testcluster.SiteConfig("bench", nil, 0)) + fmt.Sprintf(
			"  - {name: bench, kind: postgres, postgres: {dsn: %q, password_file: %q, table: bench}, timeout: 10s, backoff_floor: 20ms, backoff_max: 200ms, max_attempts: 0, max_payload_bytes: 65536}\n",
			b.pg.DSN, b.pg.PasswordFile))
	}
	if b.o.deliverKind == "mqtt" {
		if b.mq, err = testcluster.StartMosquitto(b.c.Dir); err != nil {
			return err
		}
		b.mq.Stop() // refusing (down) until the deliver phase
		site = []byte(string(testcluster.SiteConfig("bench", nil, 0)) + fmt.Sprintf(
			"  - {name: bench, kind: mqtt, mqtt: {broker: %q, topic: \"bench/{target}\", username: scadad, password_file: %q}, timeout: 10s, backoff_floor: 20ms, backoff_max: 200ms, max_attempts: 0, max_payload_bytes: 65536}\n",
			b.mq.URL, b.mq.PasswordFile))
	}
	// A long backoff: refused deliveries during the write phases stay rare.
	site = []byte(strings.Replace(string(site), "backoff_floor: 20ms, backoff_max: 200ms", "backoff_floor: 30s, backoff_max: 30s", 1))
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

type client struct {
	conn *grpc.ClientConn
	api  controlpb.ControlClient
}

func (b *bench) client(n *testcluster.Node) (*client, error) {
	conn, err := grpc.NewClient(n.APIAddr, grpcdial.ControlAPI(b.tls)...)
	if err != nil {
		return nil, err
	}
	return &client{conn: conn, api: controlpb.NewControlClient(conn)}, nil
}

func (c *client) enqueue(ctx context.Context, id string, payload []byte) error {
	_, err := c.api.SFEnqueue(ctx, &controlpb.SFEnqueueRequest{Target: "bench", Id: id, Payload: payload})
	return err
}

func (c *client) Close() { c.conn.Close() }

// enqueuer is one connection's way to enqueue: the gRPC control API or
// the node's local HTTP endpoint.
type enqueuer interface {
	enqueue(ctx context.Context, id string, payload []byte) error
	Close()
}

// httpEnqueuer posts to POST /v1/sf/bench over its own keep-alive
// connection.
type httpEnqueuer struct {
	url    string
	bearer string // the Authorization header's value, if any
	cl     *http.Client
}

func (h *httpEnqueuer) enqueue(ctx context.Context, id string, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", id)
	if h.bearer != "" {
		req.Header.Set("Authorization", h.bearer)
	}
	resp, err := h.cl.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("enqueue %s: HTTP %d: %s", id, resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}

func (h *httpEnqueuer) Close() { h.cl.CloseIdleConnections() }

// connEnqueuer posts to POST /v1/sf/bench over keep-alive connections it
// holds itself: each request is written in one piece and its answer read
// with http.ReadResponse, as a load generator such as wrk does, without
// http.Transport's two goroutines and channel hand-offs per connection. A
// connection is used by one request at a time; a busy pool dials another.
type connEnqueuer struct {
	addr, path string
	tls        *tls.Config // nil: plain HTTP
	bearer     string      // the Authorization header's value, if any
	mu         sync.Mutex
	idle       []*benchConn
}

type benchConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func (h *connEnqueuer) get(ctx context.Context) (*benchConn, error) {
	h.mu.Lock()
	if n := len(h.idle); n > 0 {
		bc := h.idle[n-1]
		h.idle = h.idle[:n-1]
		h.mu.Unlock()
		return bc, nil
	}
	h.mu.Unlock()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, err
	}
	if h.tls != nil {
		tc := tls.Client(c, h.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	return &benchConn{c: c, br: bufio.NewReaderSize(c, 4096), bw: bufio.NewWriterSize(c, 4096)}, nil
}

func (h *connEnqueuer) enqueue(ctx context.Context, id string, payload []byte) error {
	bc, err := h.get(ctx)
	if err != nil {
		return err
	}
	status, body, keep, err := bc.post(ctx, h.addr, h.path, id, h.bearer, payload)
	if err != nil || !keep {
		bc.c.Close()
	} else {
		h.mu.Lock()
		h.idle = append(h.idle, bc)
		h.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("enqueue %s: %w", id, err)
	}
	if status/100 != 2 {
		return fmt.Errorf("enqueue %s: HTTP %d: %s", id, status, bytes.TrimSpace(body))
	}
	return nil
}

func (bc *benchConn) post(ctx context.Context, host, path, id, bearer string, payload []byte) (status int, body []byte, keep bool, err error) {
	dl, _ := ctx.Deadline()
	if err := bc.c.SetDeadline(dl); err != nil {
		return 0, nil, false, err
	}
	fmt.Fprintf(bc.bw, "POST %s HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\n", path, host, id)
	if bearer != "" {
		fmt.Fprintf(bc.bw, "Authorization: %s\r\n", bearer)
	}
	fmt.Fprintf(bc.bw, "Content-Length: %d\r\n\r\n", len(payload))
	bc.bw.Write(payload)
	if err := bc.bw.Flush(); err != nil {
		return 0, nil, false, err
	}
	resp, err := http.ReadResponse(bc.br, nil)
	if err != nil {
		return 0, nil, false, err
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return 0, nil, false, err
	}
	return resp.StatusCode, body, !resp.Close, nil
}

func (h *connEnqueuer) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, bc := range h.idle {
		bc.c.Close()
	}
	h.idle = nil
}

// streamEnqueuer sends on one SFEnqueueStream. Answers come back in the
// order sent, so each answer goes to the oldest waiting sender.
type streamEnqueuer struct {
	conn   *grpc.ClientConn
	stream controlpb.Control_SFEnqueueStreamClient

	mu      sync.Mutex      // orders Send with its place in waiters
	waiters chan chan error // oldest first
}

func (b *bench) streamClient(n *testcluster.Node) (*streamEnqueuer, error) {
	c, err := b.client(n)
	if err != nil {
		return nil, err
	}
	stream, err := c.api.SFEnqueueStream(context.Background())
	if err != nil {
		c.Close()
		return nil, err
	}
	s := &streamEnqueuer{conn: c.conn, stream: stream, waiters: make(chan chan error, 1<<14)}
	go s.receive()
	return s, nil
}

func (s *streamEnqueuer) receive() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			// Fail whoever waits now and whoever comes later.
			for {
				(<-s.waiters) <- fmt.Errorf("enqueue stream: %w", err)
			}
		}
		var answer error
		if resp.Code != 0 {
			answer = fmt.Errorf("enqueue %s: code %d: %s", resp.Id, resp.Code, resp.Error)
		}
		(<-s.waiters) <- answer
	}
}

func (s *streamEnqueuer) enqueue(ctx context.Context, id string, payload []byte) error {
	answer := make(chan error, 1)
	s.mu.Lock()
	err := s.stream.Send(&controlpb.SFEnqueueRequest{Target: "bench", Id: id, Payload: payload})
	if err == nil {
		s.waiters <- answer
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *streamEnqueuer) Close() {
	_ = s.stream.CloseSend()
	s.conn.Close()
}

// multi round-robins over several nodes' clients.
type multi struct {
	cs []enqueuer
	n  atomic.Uint64
}

func (m *multi) enqueue(ctx context.Context, id string, payload []byte) error {
	return m.cs[m.n.Add(1)%uint64(len(m.cs))].enqueue(ctx, id, payload)
}

func (m *multi) Close() {
	for _, c := range m.cs {
		c.Close()
	}
}

func (b *bench) clientFor(nodes []*testcluster.Node) (*multi, error) {
	m := &multi{}
	for _, n := range nodes {
		if b.o.api == "stream" {
			c, err := b.streamClient(n)
			if err != nil {
				return nil, err
			}
			m.cs = append(m.cs, c)
			continue
		}
		if b.o.api == "http" {
			if b.o.httpClient == "conn" {
				m.cs = append(m.cs, &connEnqueuer{addr: n.HTTPAddr, path: "/v1/sf/bench", tls: b.httpTLS, bearer: b.bearer})
				continue
			}
			scheme := "http://"
			if b.httpTLS != nil {
				scheme = "https://"
			}
			m.cs = append(m.cs, &httpEnqueuer{url: scheme + n.HTTPAddr + "/v1/sf/bench", bearer: b.bearer,
				cl: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, TLSClientConfig: b.httpTLS}}})
			continue
		}
		c, err := b.client(n)
		if err != nil {
			return nil, err
		}
		if b.o.api == "floor" {
			m.cs = append(m.cs, floorEnqueuer{c})
			continue
		}
		m.cs = append(m.cs, c)
	}
	return m, nil
}

// floorEnqueuer makes SFEnqueue calls without a target: the server answers
// InvalidArgument before storing anything, so the rate measures the unary
// call itself (client, TLS, HTTP/2, server dispatch), not the store.
type floorEnqueuer struct{ *client }

func (f floorEnqueuer) enqueue(ctx context.Context, id string, payload []byte) error {
	_, err := f.api.SFEnqueue(ctx, &controlpb.SFEnqueueRequest{Id: id, Payload: payload})
	if status.Code(err) == codes.InvalidArgument {
		return nil
	}
	if err == nil {
		return errors.New("floor: the server accepted a message without a target")
	}
	return err
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

func (b *bench) writePhase(clients, size int) (writeResult, error) {
	lead, err := b.leader()
	if err != nil {
		return writeResult{}, err
	}
	nodes := []*testcluster.Node{lead}
	if b.o.target == "all" {
		nodes = nodes[:0]
		for _, n := range b.c.Nodes {
			if !n.Witness {
				nodes = append(nodes, n)
			}
		}
	}
	nconn := b.o.conns
	if nconn <= 0 || nconn > clients {
		nconn = clients
	}
	conns := make([]*multi, nconn)
	for i := range conns {
		if conns[i], err = b.clientFor(nodes); err != nil {
			return writeResult{}, err
		}
		defer conns[i].Close()
	}
	tag := fmt.Sprintf("w%d-%d-%d", clients, size, time.Now().UnixNano())
	if b.o.warmup > 0 {
		runLoad(conns, clients, size, b.o.warmup, 0, b.idMaker(tag+"warm"))
	}
	stop := b.profile(fmt.Sprintf("write-c%d-v%d", clients, size), b.o.duration)
	r := runLoad(conns, clients, size, b.o.duration, b.o.count, b.idMaker(tag))
	stop()
	r.Target, r.API = b.o.target, b.o.api
	if b.o.api == "http" {
		r.API = "http-" + b.o.httpAuth + "-" + b.o.httpClient
	}
	return r, nil
}

// idMaker returns how write clients name their messages (-ids): "seq",
// tag/client/n as etcdbench names its keys; "random", 16 random bytes in
// hex (an idempotency key such as a UUID); "server", none, so scadad
// generates one.
func (b *bench) idMaker(tag string) func(client, n int) string {
	switch b.o.ids {
	case "random":
		return func(int, int) string {
			var r [16]byte
			_, _ = rand.Read(r[:])
			return hex.EncodeToString(r[:])
		}
	case "server":
		return func(int, int) string { return "" }
	}
	return seqIDs(tag)
}

func seqIDs(tag string) func(client, n int) string {
	return func(client, n int) string { return fmt.Sprintf("%s/%d/%d", tag, client, n) }
}

func runLoad(conns []*multi, clients, size int, d time.Duration, count int, newID func(client, n int) string) writeResult {
	val := make([]byte, size)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	lat := make([][]time.Duration, clients)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range clients {
		quota := count / clients
		if i < count%clients {
			quota++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := conns[i%len(conns)]
			for n := 0; ; n++ {
				if count > 0 && n >= quota || count <= 0 && time.Now().After(deadline) {
					return
				}
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := cli.enqueue(ctx, newID(i, n), val)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	all := slices.Concat(lat...)
	slices.Sort(all)
	return writeResult{Clients: clients, ValueBytes: size, Seconds: secs, Puts: len(all), Errors: errs.Load(),
		PutsPerSec: float64(len(all)) / secs, P50Ms: pct(all, 0.50), P99Ms: pct(all, 0.99), MaxMs: pct(all, 1)}
}

// pct is the nearest-rank percentile of sorted durations, in milliseconds.
func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := max(int(math.Ceil(q*float64(len(sorted))))-1, 0)
	return float64(sorted[i].Microseconds()) / 1000
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
			cl := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
			resp, err := cl.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", n.HTTPAddr, secs))
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

// deliverPhase fills the buffer while the sink refuses, then times the
// drain. The backlog from the write phases drains too and is counted.
func (b *bench) deliverPhase(n int) (*deliverResult, error) {
	lead, err := b.leader()
	if err != nil {
		return nil, err
	}
	conns := make([]*multi, 32)
	for i := range conns {
		if conns[i], err = b.clientFor([]*testcluster.Node{lead}); err != nil {
			return nil, err
		}
		defer conns[i].Close()
	}
	runLoad(conns, len(conns), 256, 0, n, seqIDs(fmt.Sprintf("d%d", time.Now().UnixNano())))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	total, err := b.pending(ctx)
	if err != nil {
		return nil, err
	}
	// Restart the Active so delivery starts from a fresh backoff: the sink
	// refused the head of the queue and the target now waits 30 s.
	if err := b.sink.SetFailing(false); err != nil {
		return nil, err
	}
	if b.pg != nil {
		if err := b.pg.Start(); err != nil {
			return nil, err
		}
		defer b.pg.Stop()
	}
	if b.mq != nil {
		if err := b.mq.Start(); err != nil {
			return nil, err
		}
		defer b.mq.Stop()
	}
	if _, errs, code, err := b.c.Ctl(ctx, nil, "failover"); err != nil || code != 0 {
		return nil, fmt.Errorf("failover to restart delivery: exit %d %s %v", code, errs, err)
	}
	stop := b.profile("deliver", 5*time.Second)
	defer stop()
	t0 := time.Now()
	if err := testwait.Poll(ctx, func() bool {
		p, err := b.pending(ctx)
		return err == nil && p == 0
	}); err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	return &deliverResult{Messages: int(total), Seconds: secs, PerSecond: float64(total) / secs}, nil
}

// failoverPhase: K times, wait for a healthy cluster, SIGKILL the Active,
// and measure until the first probe enqueue through the survivors is
// acknowledged.
func (b *bench) failoverPhase() (*failoverResult, error) {
	res := &failoverResult{RunsMs: []float64{}}
	for run := 1; run <= b.o.failovers; run++ {
		lead, err := b.settledLeader()
		if err != nil {
			return res, err
		}
		var survivors []*testcluster.Node
		for _, n := range b.c.Nodes {
			if n != lead && !n.Witness {
				survivors = append(survivors, n)
			}
		}
		cli, err := b.clientFor(survivors)
		if err != nil {
			return res, err
		}
		for i := range 2 * len(survivors) { // connect to every survivor before the kill
			wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = cli.enqueue(wctx, fmt.Sprintf("fo%d-%d/warm/%d", run, time.Now().UnixNano(), i), []byte("x"))
			wcancel()
			if err != nil {
				return res, fmt.Errorf("warm-up enqueue: %v", err)
			}
		}
		t0 := time.Now()
		b.c.Kill(lead)
		first := make(chan time.Time, 1)
		ctx, cancel := context.WithTimeout(context.Background(), b.o.foMax)
		tick := time.NewTicker(b.o.probeEvery)
		var took time.Duration
	probe:
		for n := 0; ; n++ {
			go func() {
				pctx, pcancel := context.WithTimeout(ctx, b.o.probeTimeout)
				defer pcancel()
				if cli.enqueue(pctx, fmt.Sprintf("fo%d-%d/probe/%d", run, t0.UnixNano(), n), []byte("x")) == nil {
					select {
					case first <- time.Now():
					default:
					}
				}
			}()
			select {
			case t := <-first:
				took = t.Sub(t0)
				break probe
			case <-ctx.Done():
				break probe
			case <-tick.C:
			}
		}
		tick.Stop()
		cancel()
		cli.Close()
		if took > 0 {
			res.RunsMs = append(res.RunsMs, float64(took.Microseconds())/1000)
			fmt.Printf("failover %d/%d: killed %s (Active), first acknowledged enqueue after %.0fms\n", run, b.o.failovers, lead.ID, float64(took.Microseconds())/1000)
		} else {
			res.Failed++
			fmt.Printf("failover %d/%d: killed %s (Active), no enqueue succeeded within %v\n", run, b.o.failovers, lead.ID, b.o.foMax)
		}
		if err := b.c.Start(lead); err != nil {
			return res, fmt.Errorf("restart %s: %v", lead.ID, err)
		}
	}
	if r := slices.Sorted(slices.Values(res.RunsMs)); len(r) > 0 {
		res.MinMs, res.MaxMs = r[0], r[len(r)-1]
		res.MedianMs = (r[(len(r)-1)/2] + r[len(r)/2]) / 2
	}
	return res, nil
}

// stallPhase stops the Active with SIGSTOP for -stall, resumes it, and
// checks that no failover followed: once the cluster is settled again the
// same node is Active with the same epoch (an election, even one the old
// leader won back, raises the term).
func (b *bench) stallPhase() (*stallResult, error) {
	res := &stallResult{StallMs: float64(b.o.stall.Microseconds()) / 1000}
	for run := 1; run <= b.o.failovers; run++ {
		lead, err := b.settledLeader()
		if err != nil {
			return res, err
		}
		before, ok := lead.Health()
		if !ok {
			return res, fmt.Errorf("%s does not answer /health/active", lead.ID)
		}
		b.c.Pause(lead)
		time.Sleep(b.o.stall)
		b.c.Resume(lead)
		// Long enough for any election the stall started to finish.
		time.Sleep(b.o.settle)
		after, err := b.leader()
		if err != nil {
			return res, err
		}
		h, _ := after.Health()
		res.Runs++
		if after == lead && h.Epoch == before.Epoch {
			res.RodeOut++
			fmt.Printf("stall %d/%d: %s stopped for %s, still Active at epoch %s\n", run, b.o.failovers, lead.ID, b.o.stall, h.Epoch)
		} else {
			res.FailedOver = append(res.FailedOver, fmt.Sprintf("%s@%s->%s@%s", lead.ID, before.Epoch, after.ID, h.Epoch))
			fmt.Printf("stall %d/%d: %s stopped for %s: failed over, %s Active at epoch %s (was %s)\n", run, b.o.failovers, lead.ID, b.o.stall, after.ID, h.Epoch, before.Epoch)
		}
	}
	return res, nil
}

// exitCleanup holds what must run (kill the nodes, stop the sink, remove
// the data) before the process exits on a fatal error or a signal, either
// of which skips main's defers.
type exitCleanup struct {
	mu sync.Mutex
	fn func()
}

func (e *exitCleanup) set(fn func()) {
	e.mu.Lock()
	e.fn = fn
	e.mu.Unlock()
}

// run runs the clean-up once; a second caller (a signal during a fatal
// exit) waits for the first.
func (e *exitCleanup) run() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fn != nil {
		e.fn()
		e.fn = nil
	}
}

// atExit is main's; fatalf needs it from every phase.
var atExit exitCleanup

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "scadabench: "+format+"\n", a...)
	atExit.run()
	os.Exit(1)
}

// exitOnSignal cleans up and exits when the benchmark is interrupted or
// terminated, so no node, sink or data folder outlives it.
func exitOnSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		fatalf("%v: stopping the cluster", <-sigs)
	}()
}

// deployPhase pushes a generated 50 x 250-tag site config (about 5 MB) and
// times until every node has applied it, then changes one tag and times
// that too.
func (b *bench) deployPhase() (*deployResult, error) {
	site := siteconfig.Generate(50, 250)
	// The OPC UA server here speaks SecurityPolicy None only (see the
	// docs/opcua.md's gopcua notes), so the generated site must not ask for more.
	site.OPCUA.Security = []siteconfig.SecurityPair{{Policy: "None", Mode: "None"}}
	site.Targets = append(site.Targets, siteconfig.Target{Name: "bench", URL: b.sink.URL, BackoffFloor: 30 * time.Second, BackoffMax: 30 * time.Second})
	first, err := siteconfig.Canonical(site)
	if err != nil {
		return nil, err
	}
	changed := site.Clone()
	changed.Instances[7].Attributes[42].Tag += ".Alt"
	second, err := siteconfig.Canonical(changed)
	if err != nil {
		return nil, err
	}
	res := &deployResult{ArtifactBytes: len(first), Tags: 50 * 250}
	old, err := siteconfig.Parse(first)
	if err != nil {
		return nil, err
	}
	neu, err := siteconfig.Parse(second)
	if err != nil {
		return nil, err
	}
	diff := siteconfig.Diff(old, neu)
	for _, ic := range diff.Instances {
		res.ChangedEntries += len(ic.Attributes)
	}
	lead, err := b.leader()
	if err != nil {
		return nil, err
	}
	cli, err := b.client(lead)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	push := func(artifact []byte) (float64, float64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		t0 := time.Now()
		resp, err := cli.api.DeployPush(ctx, &controlpb.DeployPushRequest{Artifact: artifact, Message: "scadabench"}, grpc.MaxCallSendMsgSize(64<<20))
		if err != nil {
			return 0, 0, err
		}
		pushed := time.Since(t0)
		err = testwait.Poll(ctx, func() bool {
			st, err := cli.api.DeployStatus(ctx, &controlpb.DeployStatusRequest{})
			if err != nil {
				return false
			}
			ok := 0
			for _, n := range st.Nodes {
				if n.Revision == resp.Revision && n.Ok {
					ok++
				}
			}
			return ok == len(b.c.Nodes)
		})
		return float64(time.Since(t0).Microseconds()) / 1000, float64(pushed.Microseconds()) / 1000, err
	}
	if res.PushToAllMs, _, err = push(first); err != nil {
		return nil, err
	}
	if res.OneTagToAllMs, res.OneTagPushMs, err = push(second); err != nil {
		return nil, err
	}
	return res, nil
}

// bufferPhase fills the buffer with n pending messages (the sink refuses
// them), reads each node's memory, restarts every node and times until one
// is Active again, then wipes a follower and times its catch-up.
func (b *bench) bufferPhase(n, size int) (*bufferResult, error) {
	if err := b.sink.SetFailing(true); err != nil {
		return nil, err
	}
	lead, err := b.leader()
	if err != nil {
		return nil, err
	}
	conns := make([]*multi, 64)
	for i := range conns {
		if conns[i], err = b.clientFor([]*testcluster.Node{lead}); err != nil {
			return nil, err
		}
		defer conns[i].Close()
	}
	// Sample every node's RSS each second during the fill: the figure at
	// its end alone could miss a peak.
	peak := make([]int, len(b.c.Nodes))
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			for i, nd := range b.c.Nodes {
				if rss, _ := nodeMemory(nd); rss > peak[i] {
					peak[i] = rss
				}
			}
		}
	}()
	t0 := time.Now()
	w := runLoad(conns, len(conns), size, 0, n, seqIDs(fmt.Sprintf("buf%d", time.Now().UnixNano())))
	close(stopSampling)
	<-sampled
	res := &bufferResult{Messages: w.Puts, PayloadBytes: size, FillSeconds: time.Since(t0).Seconds(), RSSPeakMiB: peak}
	for _, nd := range b.c.Nodes {
		rss, anon := nodeMemory(nd)
		res.RSSMiB = append(res.RSSMiB, rss)
		res.RSSAnonMiB = append(res.RSSAnonMiB, anon)
		res.RSSFileMiB = append(res.RSSFileMiB, mappedFiles(nd))
	}
	if st, err := os.Stat(filepath.Join(lead.Dir, "data", "fsm.db")); err == nil {
		res.FSMFileMiB = int(st.Size() >> 20)
	}
	for _, nd := range b.c.Nodes {
		b.c.Stop(nd)
	}
	t1 := time.Now()
	if err := b.c.StartAll(); err != nil {
		return nil, err
	}
	if _, err := b.leader(); err != nil {
		return nil, err
	}
	res.RestartToActive = time.Since(t1).Seconds()
	for _, nd := range b.c.Nodes {
		rss, _ := nodeMemory(nd)
		res.RSSRestartMiB = append(res.RSSRestartMiB, rss)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if res.PendingAfter, err = b.pending(ctx); err != nil {
		return nil, err
	}
	// Wipe a follower (not the witness) and time until it has applied what
	// the leader has.
	lead, err = b.leader()
	if err != nil {
		return nil, err
	}
	var follower *testcluster.Node
	for _, nd := range b.c.Nodes {
		if nd != lead && !nd.Witness {
			follower = nd
		}
	}
	b.c.Kill(follower)
	if err := os.RemoveAll(filepath.Join(follower.Dir, "data")); err != nil {
		return nil, err
	}
	lc, err := b.client(lead)
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	st, err := lc.api.Status(ctx, &controlpb.StatusRequest{})
	if err != nil {
		return nil, err
	}
	target := st.AppliedIndex
	t2 := time.Now()
	if err := b.c.Start(follower); err != nil {
		return nil, err
	}
	fc, err := b.client(follower)
	if err != nil {
		return nil, err
	}
	defer fc.Close()
	if err := testwait.Poll(ctx, func() bool {
		fs, err := fc.api.Status(ctx, &controlpb.StatusRequest{})
		return err == nil && fs.AppliedIndex >= target
	}); err != nil {
		return nil, fmt.Errorf("wiped follower did not catch up: %w", err)
	}
	res.CatchUpSeconds = time.Since(t2).Seconds()
	return res, nil
}

// nodeMemory reads VmRSS and RssAnon of the node's process, in MiB.
func nodeMemory(n *testcluster.Node) (rss, anon int) {
	pid := n.PID()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		var kb int
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
			rss = kb >> 10
		}
		if _, err := fmt.Sscanf(line, "RssAnon: %d kB", &kb); err == nil {
			anon = kb >> 10
		}
	}
	return rss, anon
}

// mappedFiles is the node's resident file pages by file, in MiB (files
// under 1 MiB left out).
func mappedFiles(n *testcluster.Node) map[string]int {
	out := map[string]int{}
	for name, kb := range n.ResidentFilesKB() {
		if kb >= 1024 {
			out[name] = kb >> 10
		}
	}
	return out
}

// serviceLevelPhase: K times, wait for a healthy cluster whose Active
// advertises 250 and serves live field data, SIGKILL it, and time until a
// client reads 250 from the survivor (a fresh connect-and-read every
// -probe-interval), and until it reads a Good value of a gateway tag
// (changing every 100 ms in the simulator) stamped after the kill.
func (b *bench) serviceLevelPhase() (*serviceLevelResult, error) {
	res := &serviceLevelResult{RunsMs: []float64{}, DataRunsMs: []float64{}}
	opts := uasec.ClientOptions{Timeout: b.o.probeTimeout}
	sim, err := testcluster.StartSim(b.c.Bin, b.c.Dir, "-change", "100ms")
	if err != nil {
		return res, err
	}
	defer sim.Close()
	site := testcluster.SiteConfigGateway("bench", sim.Addr, map[string]string{"bench": b.sink.URL}, 0)
	file := filepath.Join(b.c.Dir, "site-gateway.yaml")
	if err := os.WriteFile(file, site, 0o644); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_, errs, code, err := b.c.Ctl(ctx, nil, "deploy", "push", file)
	cancel()
	if err != nil || code != 0 {
		return res, fmt.Errorf("deploy a site config with a gateway: exit %d: %s %v", code, errs, err)
	}
	for run := 1; run <= b.o.failovers; run++ {
		lead, err := b.leader()
		if err != nil {
			return res, err
		}
		var survivor *testcluster.Node
		for _, n := range b.c.Nodes {
			if n != lead && !n.Witness {
				survivor = n
			}
		}
		// Healthy means the Active advertises 250 and the Standby 240.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = testwait.Poll(ctx, func() bool {
			a, errA := opcua.ReadServiceLevel(ctx, lead.OPCUA, opts)
			s, errS := opcua.ReadServiceLevel(ctx, survivor.OPCUA, opts)
			return errA == nil && errS == nil && a == 250 && s == 240
		})
		cancel()
		if err != nil {
			return res, fmt.Errorf("the pair never reached 250/240 before the kill")
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		err = testwait.Poll(ctx, func() bool { return freshGoodValue(ctx, lead.OPCUA, opts, time.Now().Add(-time.Second)) })
		cancel()
		if err != nil {
			return res, fmt.Errorf("the Active %s never served live field data before the kill", lead.ID)
		}
		gap, stopWatch, err := watchGap(lead.OPCUA, survivor.OPCUA, opts)
		if err != nil {
			return res, err
		}
		time.Sleep(b.o.settle)
		t0 := time.Now()
		b.c.Kill(lead)
		ctx, cancel = context.WithTimeout(context.Background(), b.o.foMax)
		var took time.Duration
		for ctx.Err() == nil {
			if lvl, err := opcua.ReadServiceLevel(ctx, survivor.OPCUA, opts); err == nil && lvl == 250 {
				took = time.Since(t0)
				break
			}
			time.Sleep(b.o.probeEvery)
		}
		var data time.Duration
		for ctx.Err() == nil {
			if freshGoodValue(ctx, survivor.OPCUA, opts, t0) {
				data = time.Since(t0)
				break
			}
			time.Sleep(b.o.probeEvery)
		}
		g, gapOK := gap(ctx)
		stopWatch()
		cancel()
		if gapOK {
			res.GapRunsMs = append(res.GapRunsMs, float64(g.Microseconds())/1000)
			fmt.Printf("notification gap %d/%d: %v\n", run, b.o.failovers, g)
		} else {
			res.GapFailed++
		}
		if took > 0 {
			res.RunsMs = append(res.RunsMs, float64(took.Microseconds())/1000)
			fmt.Printf("servicelevel %d/%d: killed %s, %s advertised 250 after %.0fms\n", run, b.o.failovers, lead.ID, survivor.ID, float64(took.Microseconds())/1000)
		} else {
			res.Failed++
		}
		if data > 0 {
			res.DataRunsMs = append(res.DataRunsMs, float64(data.Microseconds())/1000)
			fmt.Printf("field data %d/%d: %s served a Good value stamped after the kill %.0fms after it\n", run, b.o.failovers, survivor.ID, float64(data.Microseconds())/1000)
		} else {
			res.DataFailed++
		}
		if err := b.c.Start(lead); err != nil {
			return res, err
		}
	}
	if r := slices.Sorted(slices.Values(res.RunsMs)); len(r) > 0 {
		res.MinMs, res.MaxMs = r[0], r[len(r)-1]
		res.MedianMs = (r[(len(r)-1)/2] + r[len(r)/2]) / 2
	}
	if r := slices.Sorted(slices.Values(res.DataRunsMs)); len(r) > 0 {
		res.DataMinMs, res.DataMaxMs = r[0], r[len(r)-1]
		res.DataMedianMs = (r[(len(r)-1)/2] + r[len(r)/2]) / 2
	}
	if r := slices.Sorted(slices.Values(res.GapRunsMs)); len(r) > 0 {
		res.GapMinMs, res.GapMaxMs = r[0], r[len(r)-1]
		res.GapMedianMs = (r[(len(r)-1)/2] + r[len(r)/2]) / 2
	}
	return res, nil
}

var gapLine = regexp.MustCompile(`notification gap (\S+)`)

// watchGap starts the failover-following client `scadactl opcua watch`
// runs (opcua.WatchWith) on Pump1.Speed of both voters and waits until it
// receives values from lead. gap then waits (within ctx) for the gap the
// client reports after a failover; stop ends the client.
func watchGap(lead, survivor string, opts uasec.ClientOptions) (gap func(context.Context) (time.Duration, bool), stop func(), err error) {
	out := &lockedbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = opcua.WatchWith(ctx, []string{lead, survivor}, "ns=2;s=Pump1.Speed", out, opts)
	}()
	stop = func() { cancel(); <-done }
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := testwait.Poll(wctx, func() bool { return strings.Count(out.String(), lead+" ns=2;s=Pump1.Speed = ") >= 3 }); err != nil {
		stop()
		return nil, nil, fmt.Errorf("the watching client got no values from the Active %s:\n%s", lead, out.String())
	}
	gap = func(ctx context.Context) (time.Duration, bool) {
		var d time.Duration
		err := testwait.Poll(ctx, func() bool {
			m := gapLine.FindStringSubmatch(out.String())
			if m == nil {
				return false
			}
			var perr error
			d, perr = time.ParseDuration(m[1])
			return perr == nil
		})
		return d, err == nil
	}
	return gap, stop, nil
}

// freshGoodValue reports whether the OPC UA server at url serves the
// site's Pump1.Speed with Good quality and a source timestamp after since.
func freshGoodValue(ctx context.Context, url string, opts uasec.ClientOptions, since time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	c, err := uasec.Dial(ctx, url, opts)
	if err != nil {
		return false
	}
	defer opts.Close(c)
	ns, err := c.FindNamespace(ctx, "urn:test:scadad")
	if err != nil {
		return false
	}
	resp, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: ua.NewStringNodeID(ns, "Pump1.Speed"), AttributeID: ua.AttributeIDValue}}, TimestampsToReturn: ua.TimestampsToReturnBoth})
	if err != nil || len(resp.Results) != 1 {
		return false
	}
	dv := resp.Results[0]
	return dv.Status == ua.StatusOK && dv.Value != nil && dv.SourceTimestamp.After(since)
}
