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
//     With -deliver-mode live instead, P producers enqueue while the
//     receiver accepts, and over a window in steady state the distinct ids
//     that reach the receiver give messages/s, with the backlog at the
//     window's start and end (does delivery keep up?). -deliver-backlog N
//     adds the return from an outage: N messages enqueued while the
//     receiver is down, then the receiver comes up as the producers start,
//     and the window measures delivery while the backlog is worked off.
//
// The cluster is real scadad processes on 127.0.0.1 (two voters + witness
// by default), built from this tree. Output: one human-readable line per
// run, then one JSON line with all figures.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
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
	deliverKind, deliverMode     string
	mqttReceiveMaximum           int
	mqttProtocol                 string
	deliverProducers             int
	deliverBacklog               int
	deliverBacklogMax            time.Duration
	deliverWarmup, deliverWindow time.Duration
	witness, keep, sinkFsync     bool
	pprof                        bool
	cpuProfile                   string
	bufferN, bufferSize          int
	clients, sizes               []int
	duration, warmup, probeEvery time.Duration
	probeTimeout, settle, foMax  time.Duration
}

// overHTTP says the write clients post to the node's HTTP enqueue (-api
// http, or http-floor's refused requests), so the -http-* flags apply.
func (o options) overHTTP() bool { return o.api == "http" || o.api == "http-floor" }

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
	// DeliverLive is -deliver-mode live's.
	DeliverLive *deliverLiveResult `json:"deliver_live,omitempty"`
	Deploy      *deployResult      `json:"deploy,omitempty"`
	Buffer      *bufferResult      `json:"buffer,omitempty"`
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
	defer b.closeReceivers()
	atExit.set(func() {
		b.closeReceivers()
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
				moved := ""
				if r.LeaderMoved != "" {
					moved = " LEADER MOVED during the run (" + r.LeaderMoved + ")"
				}
				fmt.Printf("write clients=%-3d value=%dB target=%s api=%s: %.0f enqueues/s (%d in %.1fs, %d errors) p50=%.2fms p99=%.2fms max=%.1fms%s\n",
					r.Clients, r.ValueBytes, r.Target, r.API, r.PutsPerSec, r.Puts, r.Seconds, r.Errors, r.P50Ms, r.P99Ms, r.MaxMs, moved)
			}
		}
	}
	if strings.Contains(o.phases, "deliver") && o.deliverMode == "live" {
		d, err := b.deliverLivePhase(o.deliverProducers, o.sizes[0])
		if err != nil {
			fatalf("deliver phase: %v", err)
		}
		rep.DeliverLive = d
		receiver := d.Kind
		switch d.Kind {
		case "http":
			receiver = fmt.Sprintf("http (sink fsync=%v)", o.sinkFsync)
		case "mqtt":
			// Mosquitto's max_inflight_messages is the receive maximum an
			// MQTT 5 client must keep to; 3.1.1 has none.
			inflight := "20, its default"
			if o.mqttReceiveMaximum > 0 {
				inflight = strconv.Itoa(o.mqttReceiveMaximum)
			}
			receiver = fmt.Sprintf("mqtt %s (Mosquitto max_inflight_messages %s)", o.mqttProtocol, inflight)
		}
		if d.BacklogFilled > 0 {
			fmt.Println(backlogLine(d, receiver, o))
		} else {
			fmt.Printf("deliver (live): %d producers enqueueing %d-byte messages to a local %s target (max_in_flight=%d, batch_max_messages=%d): over %.1fs %.0f enqueues/s acknowledged (%d errors), %.0f distinct messages/s reached the receiver; backlog %d at the window's start, %d at its end\n",
				d.Producers, d.ValueBytes, receiver, o.deliverInFlight, o.deliverBatch, d.WindowSeconds, d.EnqueuedPerSec, d.Errors, d.ReceivedPerSec, d.BacklogStart, d.BacklogEnd)
		}
	}
	if strings.Contains(o.phases, "deliver") && o.deliverMode == "drain" && o.deliverN > 0 {
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
		fmt.Printf("buffer: %d pending %d-byte messages (filled in %.0fs); RSS per node %v MiB (peak during the fill %v MiB, of it anonymous %v MiB; after it anonymous %v MiB, mapped files %v MiB, state file %d MiB); all nodes restarted -> Active in %.2fs with %d pending, RSS then %v MiB; a wiped follower caught up in %.1fs\n",
			r.Messages, r.PayloadBytes, r.FillSeconds, r.RSSMiB, r.RSSPeakMiB, r.RSSPeakAnonMiB, r.RSSAnonMiB, r.RSSFileMiB, r.FSMFileMiB, r.RestartToActive, r.PendingAfter, r.RSSRestartMiB, r.CatchUpSeconds)
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

// backlogLine is -deliver-backlog's result in words.
func backlogLine(d *deliverLiveResult, receiver string, o options) string {
	line := fmt.Sprintf("deliver (live, after an outage): %d messages enqueued while the receiver was down, then it came up as %d producers started enqueueing %d-byte messages to a local %s target (max_in_flight=%d, batch_max_messages=%d): over %.1fs %.0f enqueues/s acknowledged (%d errors), %.0f distinct messages/s reached the receiver; backlog %d at the window's start, %d at its end; ",
		d.BacklogFilled, d.Producers, d.ValueBytes, receiver, o.deliverInFlight, o.deliverBatch, d.WindowSeconds, d.EnqueuedPerSec, d.Errors, d.ReceivedPerSec, d.BacklogStart, d.BacklogEnd)
	switch {
	case d.WindowCutShort:
		line += fmt.Sprintf("the backlog was gone %.1fs after the receiver came up, and the window ended there, %.1fs short of -deliver-window (fill more with -deliver-backlog to measure the whole window)", d.BacklogGoneSeconds, o.deliverWindow.Seconds()-d.WindowSeconds)
	case d.BacklogGoneSeconds > 0:
		line += fmt.Sprintf("the backlog was gone %.1fs after the receiver came up", d.BacklogGoneSeconds)
	default:
		line += fmt.Sprintf("the backlog was not gone %s after the receiver came up", o.deliverBacklogMax)
	}
	return line
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
	flag.StringVar(&o.api, "api", "grpc", "how write clients enqueue: grpc (the control API's unary SFEnqueue, mutual TLS), stream (its SFEnqueueStream, one stream per connection, each client waiting for its answer) http (the node's local POST /v1/sf/TARGET) floor (unary SFEnqueue calls without a target, which the server refuses before storing anything: the ceiling the gRPC and TLS round trip alone puts on -api grpc) or http-floor (-api http's client and requests to a target the site does not have, which the node answers 404 before storing anything: the ceiling the HTTP round trip alone puts on -api http; -http-auth insecure only)")
	flag.StringVar(&o.httpAuth, "http-auth", "insecure", "-api http and http-floor: insecure (the nodes run http.insecure: true, plain HTTP, no credentials) or token (HTTPS with the node's certificate, checked against the site CA, and a bearer token from scadactl tokens create limited to the bench target: the default production setup)")
	flag.StringVar(&o.httpClient, "http-client", "transport", "-api http and http-floor: transport (net/http's Client and Transport) or conn (each connection written and read directly, http.ReadResponse for answers: a load generator's cost, as wrk's)")
	flag.IntVar(&o.failovers, "failovers", 5, "failover repetitions K (also the stall phase's)")
	flag.DurationVar(&o.stall, "stall", 300*time.Millisecond, "stall phase: how long the Active is stopped (SIGSTOP, then SIGCONT) in each of -failovers runs; the cluster rides it out when the same node is Active afterwards in the same term")
	flag.DurationVar(&o.probeEvery, "probe-interval", 10*time.Millisecond, "failover: start a new probe enqueue this often until one succeeds")
	flag.DurationVar(&o.probeTimeout, "probe-timeout", time.Second, "failover: timeout of each probe")
	flag.DurationVar(&o.foMax, "failover-max", 30*time.Second, "failover: give up on a run after this long")
	flag.DurationVar(&o.settle, "settle", 2*time.Second, "failover: idle time after the cluster is healthy before each kill")
	flag.IntVar(&o.deliverN, "deliver-messages", 20000, "deliver: messages to drain")
	flag.IntVar(&o.deliverInFlight, "deliver-in-flight", 1, "deliver: the target's max_in_flight (1: strict enqueue order)")
	flag.IntVar(&o.deliverBatch, "deliver-batch", 0, "deliver: the target's batch_max_messages (0: one message per delivery)")
	flag.IntVar(&o.mqttReceiveMaximum, "mqtt-receive-maximum", 0, "deliver: the bench's Mosquitto lets a client have this many QoS 1 publishes awaiting their PUBACK (max_inflight_messages; 0: Mosquitto's default, 20)")
	flag.StringVar(&o.mqttProtocol, "mqtt-protocol", "5", "deliver: the mqtt target's protocol, 5 or 3.1.1 (the message id then in the topic)")
	flag.StringVar(&o.deliverKind, "deliver-kind", "http", "deliver: the target's kind: http (a local sfsink), postgres (a PostgreSQL server of the bench's own, testcluster.StartPostgres) or mqtt (a Mosquitto of its own, QoS 1 publishes with no subscriber), the server stopped while the buffer fills")
	flag.StringVar(&o.deliverMode, "deliver-mode", "drain", "deliver: drain (fill the buffer while the receiver is down, then time the drain) or live (the receiver up throughout; -deliver-producers enqueue -value-size messages, and after -deliver-warmup the distinct ids reaching the receiver over -deliver-window give the rate; needs -phases deliver alone)")
	flag.IntVar(&o.deliverProducers, "deliver-producers", 64, "deliver, live: concurrent producers, one connection each")
	flag.DurationVar(&o.deliverWarmup, "deliver-warmup", 3*time.Second, "deliver, live: enqueueing before the window, to reach a steady state")
	flag.DurationVar(&o.deliverWindow, "deliver-window", 10*time.Second, "deliver, live: the measured window")
	flag.IntVar(&o.deliverBacklog, "deliver-backlog", 0, "deliver, live: if > 0, first enqueue this many messages while the receiver is down, then bring it up and start the producers together: the window measures delivery while the backlog is worked off (it ends early, and says so, if the backlog is gone before -deliver-window)")
	flag.DurationVar(&o.deliverBacklogMax, "deliver-backlog-max", 2*time.Minute, "deliver, live, -deliver-backlog: how long after the receiver comes up to wait for the backlog to be gone (the time is reported if within it)")
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
	switch {
	case o.deliverMode != "drain" && o.deliverMode != "live":
		fatalf("bad -deliver-mode %q: want drain or live", o.deliverMode)
	case o.deliverMode == "live" && o.phases != "deliver":
		fatalf("-deliver-mode live runs with -phases deliver alone (its receiver accepts from the start), not %q", o.phases)
	case o.deliverMode == "live" && (o.deliverProducers < 1 || o.deliverWindow <= 0 || o.deliverWarmup < 0):
		fatalf("-deliver-mode live: -deliver-producers %d, -deliver-window %s, -deliver-warmup %s: want at least one producer and a window", o.deliverProducers, o.deliverWindow, o.deliverWarmup)
	case o.deliverBacklog < 0 || o.deliverBacklog > 0 && o.deliverMode != "live":
		fatalf("-deliver-backlog %d: want a count of messages (0: none), with -deliver-mode live", o.deliverBacklog)
	case o.deliverBacklog > 0 && o.deliverBacklogMax <= o.deliverWarmup+o.deliverWindow:
		fatalf("-deliver-backlog-max %s: want more than -deliver-warmup and -deliver-window together (%s)", o.deliverBacklogMax, o.deliverWarmup+o.deliverWindow)
	}
	if o.mqttProtocol != "5" && o.mqttProtocol != "3.1.1" {
		fatalf("-mqtt-protocol %q: want 5 or 3.1.1", o.mqttProtocol)
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
	if o.api != "grpc" && o.api != "stream" && o.api != "http" && o.api != "floor" && o.api != "http-floor" {
		fatalf("bad -api %q: want grpc, stream, http, floor or http-floor", o.api)
	}
	if o.api == "http-floor" && o.httpAuth != "insecure" {
		// With a token limited to the bench target the gate, not the
		// handler, would refuse: a different path from -api http's.
		fatalf("-api http-floor needs -http-auth insecure")
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
