package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/pki"
)

// TestStreamRefusesWhatIsNotAMember checks the transport's admission rules
// on one listener: a member's raft stream and probe get in; a certificate
// from the right CA whose CN is no member, a certificate from a foreign CA
// and a client that does not speak the raft protocol are refused, each with
// a log line that says why.
func TestStreamRefusesWhatIsNotAMember(t *testing.T) {
	site, err := pki.GenerateSite("s", []string{"a", "b", "intruder"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	site0 := site
	foreign, err := pki.GenerateSite("s", []string{"b"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	members := staticDirectory{{ID: "a", RaftAddr: ln.Addr().String()}, {ID: "b", RaftAddr: "127.0.0.1:1"}}
	srv, _ := site.ServerTLS("a")
	cli, _ := site.ClientTLS("a")
	logs := &lockedbuf.Buffer{}
	contacted := make(chan string, 16)
	s := newTLSStream(ln, ln.Addr().String(), srv, cli, members, func(id string) { contacted <- id },
		func() peerStatus { return peerStatus{ID: "a", State: "Follower", Voters: []string{"a", "b"}} }, zerolog.New(logs))
	t.Cleanup(func() { _ = s.close() })
	v := s.newView()
	t.Cleanup(func() { _ = v.Close() })

	dialAs := func(site *pki.Site, name, alpn string) error {
		cfg, err := site.ClientTLS(name)
		if err != nil {
			t.Fatal(err)
		}
		// Trust the real site CA, whatever signed our own certificate, so
		// the verdict is the server's.
		cfg.RootCAs = site0.CA.Pool()
		cfg.ServerName = "a"
		if alpn != "" {
			cfg.NextProtos = []string{alpn}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer conn.Close()
		// With TLS 1.3 the server's verdict on our certificate arrives
		// after our side of the handshake: read for it.
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		if err != nil && (strings.Contains(err.Error(), "timeout") || errors.Is(err, context.DeadlineExceeded)) {
			return nil // the server kept the stream open: admitted
		}
		return err
	}

	// A member's raft stream is handed to raft.
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := v.Accept()
		if err != nil {
			t.Errorf("Accept: %v", err)
			close(accepted)
			return
		}
		accepted <- c
	}()
	if err := dialAs(site, "b", alpnRaft); err != nil {
		t.Fatalf("member b refused: %v", err)
	}
	c, ok := <-accepted
	if !ok {
		t.Fatal("no connection accepted")
	}
	c.Close()
	if id := <-contacted; id != "b" {
		t.Fatalf("contact recorded for %q, want b", id)
	}

	cases := []struct {
		name, alpn string
		site       *pki.Site
		as         string
		logSays    string
	}{
		{"right CA, not a member", alpnRaft, site, "intruder", "not a cluster member"},
		{"foreign CA", alpnRaft, foreign, "b", "foreign CA"},
		{"no raft protocol", "", site, "b", "did not negotiate the raft protocol"},
		{"unknown protocol", "h2", site, "b", "unsupported application protocols"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := dialAs(tc.site, tc.as, tc.alpn); err == nil {
				t.Fatal("connection was admitted")
			}
			testwait.ForDetail(t, 3*time.Second, "refusal logged", func() (bool, string) {
				return strings.Contains(logs.String(), tc.logSays), logs.String()
			})

		})
	}

	// A probe from a member reads the status and closes.
	bs := newTLSStream(mustListen(t), "127.0.0.1:2", mustTLS(t, site.ServerTLS, "b"), mustTLS(t, site.ClientTLS, "b"),
		members, func(string) {}, func() peerStatus { return peerStatus{} }, zerolog.Nop())
	t.Cleanup(func() { _ = bs.close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := bs.probe(ctx, ln.Addr().String())
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	if st.ID != "a" || len(st.Voters) != 2 {
		t.Fatalf("probe status = %+v", st)
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func mustTLS(t *testing.T, f func(string) (*tls.Config, error), name string) *tls.Config {
	t.Helper()
	c, err := f(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTransportReplicatesWithoutPipeline guards the fix for raft's pipeline
// deadlock: the transport must refuse pipelines (raft then replicates with
// plain AppendEntries) and keep pre-vote and Close, which raft finds by
// interface assertion.
func TestTransportReplicatesWithoutPipeline(t *testing.T) {
	var trans raft.Transport = &noPipelineTransport{NetworkTransport: raft.NewNetworkTransport(newNopStream(), 1, time.Second, io.Discard)}
	defer trans.(raft.WithClose).Close()
	p, err := trans.AppendEntriesPipeline("node-b", "127.0.0.1:1")
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) || p != nil {
		t.Fatalf("AppendEntriesPipeline = %v, %v; want nil, ErrPipelineReplicationNotSupported", p, err)
	}
	if _, ok := trans.(raft.WithPreVote); !ok {
		t.Error("transport lost raft.WithPreVote: pre-vote would be off")
	}
	if _, ok := trans.(raft.WithClose); !ok {
		t.Error("transport lost raft.WithClose: raft would not close it on shutdown")
	}
}

// nopStream is a stream layer that accepts nothing and dials nowhere.
type nopStream struct {
	closed chan struct{}
	once   sync.Once
}

func newNopStream() *nopStream { return &nopStream{closed: make(chan struct{})} }

func (s *nopStream) Accept() (net.Conn, error) { <-s.closed; return nil, net.ErrClosed }
func (s *nopStream) Close() error              { s.once.Do(func() { close(s.closed) }); return nil }
func (s *nopStream) Addr() net.Addr            { return advertiseAddr("127.0.0.1:1") }
func (s *nopStream) Dial(raft.ServerAddress, time.Duration) (net.Conn, error) {
	return nil, errors.New("nop stream dials nowhere")
}

func TestAppendOutcomes(t *testing.T) {
	var a appendOutcomes
	start := a.mark()
	if a.refusing("b") || a.knowWhoStores([]string{"b"}, start) {
		t.Fatal("an unknown follower counts as refusing or answered")
	}
	a.note("b", false)
	a.note("c", true)
	if !a.refusing("b") || a.refusing("c") {
		t.Fatal("outcomes not noted")
	}
	later := a.mark()
	a.note("b", true)
	if a.refusing("b") || !a.knowWhoStores([]string{"b"}, later) || a.knowWhoStores([]string{"c"}, later) {
		t.Fatal("a stored append does not clear the refusal, or marks leak")
	}
}

func TestKnowWhoStores(t *testing.T) {
	type noted struct {
		id     string
		stored bool
	}
	cases := []struct {
		name   string
		before map[string]bool // outcomes noted before the mark (id → stored)
		after  []noted         // noted after it
		want   bool
	}{
		{name: "nobody answered yet", before: map[string]bool{"a": true, "b": true}, want: false},
		{name: "one stored, the other is down", after: []noted{{"a", true}}, want: true},
		{name: "one refused, the other silent", after: []noted{{"a", false}}, want: false},
		{name: "both refused", after: []noted{{"a", false}, {"b", false}}, want: true},
		{name: "one refused, the other stored", after: []noted{{"a", false}, {"b", true}}, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var a appendOutcomes
			for id, stored := range tc.before {
				a.note(id, stored)
			}
			mark := a.mark()
			for _, o := range tc.after {
				a.note(o.id, o.stored)
			}
			if got := a.knowWhoStores([]string{"a", "b"}, mark); got != tc.want {
				t.Fatalf("knowWhoStores = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestProbesResumeTheirTLSSession checks that a node's probes of a member
// resume the TLS session of the one before (no certificate signatures
// or chain checks every probe interval on either side), that a resumed
// handshake is still checked against the member's deny list, and that a
// refusal drops the session, so the next probe makes a full handshake.
func TestProbesResumeTheirTLSSession(t *testing.T) {
	site, err := pki.GenerateSite("s", []string{"a", "b"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ln := mustListen(t)
	members := staticDirectory{{ID: "a", RaftAddr: ln.Addr().String()}, {ID: "b", RaftAddr: "127.0.0.1:2"}}
	var (
		mu      sync.Mutex
		resumed []bool
		denied  bool
	)
	srv := mustTLS(t, site.ServerTLS, "a")
	srv.VerifyConnection = func(cs tls.ConnectionState) error {
		mu.Lock()
		defer mu.Unlock()
		resumed = append(resumed, cs.DidResume)
		if denied {
			return errors.New("certificate revoked")
		}
		return nil
	}
	a := newTLSStream(ln, ln.Addr().String(), srv, mustTLS(t, site.ClientTLS, "a"), members, func(string) {},
		func() peerStatus { return peerStatus{ID: "a"} }, zerolog.Nop())
	t.Cleanup(func() { _ = a.close() })
	b := newTLSStream(mustListen(t), "127.0.0.1:2", mustTLS(t, site.ServerTLS, "b"), mustTLS(t, site.ClientTLS, "b"),
		members, func(string) {}, func() peerStatus { return peerStatus{} }, zerolog.Nop())
	t.Cleanup(func() { _ = b.close() })

	probe := func() (bool, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := b.probe(ctx, ln.Addr().String())
		mu.Lock()
		defer mu.Unlock()
		if len(resumed) == 0 {
			t.Fatal("the member saw no handshake")
		}
		return resumed[len(resumed)-1], err
	}
	for i, want := range []bool{false, true, true} {
		did, err := probe()
		if err != nil {
			t.Fatalf("probe %d: %v", i+1, err)
		}
		if did != want {
			t.Fatalf("probe %d resumed = %v, want %v", i+1, did, want)
		}
	}

	mu.Lock()
	denied = true
	mu.Unlock()
	did, err := probe()
	if err == nil {
		t.Fatal("a probe the member refuses succeeded")
	}
	if !did {
		t.Fatal("the refused probe did not resume: the test proves nothing about resumed handshakes")
	}

	mu.Lock()
	denied = false
	mu.Unlock()
	did, err = probe()
	if err != nil {
		t.Fatalf("probe after the refusal: %v", err)
	}
	if did {
		t.Fatal("the probe after a refusal resumed the refused session")
	}
}
