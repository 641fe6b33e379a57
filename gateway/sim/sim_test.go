package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/scadad/scadad/gateway"
	pb "github.com/scadad/scadad/gateway/gatewaypb"
	"github.com/scadad/scadad/internal/testwait"
)

func start(t *testing.T, cfg Config) (*Sim, pb.MxAccessGatewayClient) {
	t.Helper()
	s := New(cfg)
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return s, pb.NewMxAccessGatewayClient(conn)
}

func open(t *testing.T, c pb.MxAccessGatewayClient) *pb.OpenSessionReply {
	t.Helper()
	rep, err := c.OpenSession(context.Background(), &pb.OpenSessionRequest{ClientName: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func ping(sess string) *pb.MxCommandRequest {
	return &pb.MxCommandRequest{SessionId: sess, Command: &pb.MxCommand{Kind: &pb.MxCommand_Ping{Ping: &pb.PingCommand{}}}}
}

func TestApartmentRunsOneCommandAtATime(t *testing.T) {
	const n, cost = 6, 20 * time.Millisecond
	s, c := start(t, Config{CommandCost: cost})
	sess := open(t, c).GetSessionId()
	began := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Invoke(context.Background(), ping(sess)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if took := time.Since(began); took < n*cost {
		t.Fatalf("%d commands of %v took %v: not serialised", n, cost, took)
	}
	st := s.Stats()
	if st.PeakInFlight != n || st.Executed[gateway.KindPing] != n {
		t.Fatalf("peak in flight %d, executed %d; want %d and %d", st.PeakInFlight, st.Executed[gateway.KindPing], n, n)
	}
}

func TestDeadlineExceededButAbandonedCommandStillRuns(t *testing.T) {
	tests := []struct {
		name         string
		skip         bool
		wantExecuted int64
	}{
		{"real STA runs abandoned commands", false, 2},
		{"skip abandoned", true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := start(t, Config{DefaultCommandTimeout: 30 * time.Millisecond, CommandCost: 20 * time.Millisecond, SkipAbandoned: tt.skip})
			sess := open(t, c).GetSessionId()
			errs := make(chan error, 2)
			for range 2 {
				go func() { _, err := c.Invoke(context.Background(), ping(sess)); errs <- err }()
			}
			var deadlines int
			for range 2 {
				if status.Code(<-errs) == codes.DeadlineExceeded {
					deadlines++
				}
			}
			if deadlines != 1 {
				t.Fatalf("%d DeadlineExceeded, want 1 (the second waits 20ms queued + 20ms running > 30ms)", deadlines)
			}
			testwait.For(t, 10*time.Second, "queue drained", func() bool { return s.Stats().QueueLength == 0 })
			testwait.For(t, 10*time.Second, "executions counted", func() bool { return s.Stats().Executed[gateway.KindPing] >= tt.wantExecuted })
			if got := s.Stats(); got.Executed[gateway.KindPing] != tt.wantExecuted || got.DeadlineExceeded != 1 {
				t.Fatalf("executed %d, deadline exceeded %d; want %d and 1", got.Executed[gateway.KindPing], got.DeadlineExceeded, tt.wantExecuted)
			}
		})
	}
}

func TestSessionCommandTimeoutEchoAndClamp(t *testing.T) {
	tests := []struct {
		name      string
		max       time.Duration
		requested time.Duration
		want      time.Duration
	}{
		{"default when absent", 0, 0, 30 * time.Second},
		{"honoured", 0, time.Minute, time.Minute},
		{"clamped", 30 * time.Second, time.Minute, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := start(t, Config{MaxCommandTimeout: tt.max})
			req := &pb.OpenSessionRequest{}
			if tt.requested > 0 {
				req.CommandTimeout = durationOf(tt.requested)
			}
			rep, err := c.OpenSession(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := rep.GetDefaultCommandTimeout().AsDuration(); got != tt.want {
				t.Fatalf("echoed %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOldGatewayIgnoresSupervisoryFlag(t *testing.T) {
	tests := []struct {
		name      string
		caps      []string
		wantPlain int64
	}{
		{"new gateway advises supervisory", NewCapabilities(), 0},
		{"old gateway advises plain: the hazard", OldCapabilities(), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := start(t, Config{Capabilities: tt.caps})
			sess := open(t, c).GetSessionId()
			_, err := c.Invoke(context.Background(), &pb.MxCommandRequest{SessionId: sess, Command: &pb.MxCommand{
				Kind: &pb.MxCommand_SubscribeBulk{SubscribeBulk: &pb.SubscribeBulkCommand{TagAddresses: []string{"a", "b"}, Supervisory: true}}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Stats().PlainAdviseOnSupervisory; got != tt.wantPlain {
				t.Fatalf("plain advises on a supervisory session = %d, want %d", got, tt.wantPlain)
			}
		})
	}
}

func TestWedgeHoldsTheApartment(t *testing.T) {
	s, c := start(t, Config{})
	sess := open(t, c).GetSessionId()
	s.Wedge(80 * time.Millisecond)
	began := time.Now()
	if _, err := c.Invoke(context.Background(), ping(sess)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 70*time.Millisecond {
		t.Fatalf("ping during a wedge answered after %v", took)
	}
}

func TestDropRepliesOnlyForKinds(t *testing.T) {
	s, c := start(t, Config{})
	sess := open(t, c).GetSessionId()
	s.DropReplies(time.Minute, gateway.KindAddItemBulk)
	if _, err := c.Invoke(context.Background(), ping(sess)); err != nil {
		t.Fatalf("ping should still be answered: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Invoke(ctx, &pb.MxCommandRequest{SessionId: sess, Command: &pb.MxCommand{
		Kind: &pb.MxCommand_AddItemBulk{AddItemBulk: &pb.AddItemBulkCommand{TagAddresses: []string{"a"}}}}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("dropped reply returned %v, want our own deadline", err)
	}
	if st := s.Stats(); st.RepliesDropped != 1 || st.Executed[gateway.KindAddItemBulk] != 1 {
		t.Fatalf("dropped %d executed %d, want 1 and 1", st.RepliesDropped, st.Executed[gateway.KindAddItemBulk])
	}
}

func TestRestartDropsSessions(t *testing.T) {
	s, c := start(t, Config{})
	sess := open(t, c).GetSessionId()
	s.Restart()
	if _, err := c.Invoke(context.Background(), ping(sess)); status.Code(err) != codes.NotFound {
		t.Fatalf("old session after restart: %v, want NotFound", err)
	}
}

func TestAdminHandler(t *testing.T) {
	s := New(Config{})
	h := s.AdminHandler()
	do := func(method, target string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
		return rec.Code
	}
	tests := []struct {
		method, target string
		want           int
	}{
		{http.MethodPost, "/wedge?for=1ms", 200},
		{http.MethodPost, "/wedge?for=soon", 400},
		{http.MethodPost, "/drop?for=1ms&kinds=ping", 200},
		{http.MethodPost, "/capabilities?set=old", 200},
		{http.MethodPost, "/capabilities?set=newest", 400},
		{http.MethodPost, "/config?cost=5ms&per_tag=1ms&cost.ping=2ms", 200},
		{http.MethodPost, "/config?colour=red", 400},
		{http.MethodPost, "/restart", 200},
		{http.MethodPost, "/reset-stats", 200},
	}
	for _, tt := range tests {
		if got := do(tt.method, tt.target); got != tt.want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.target, got, tt.want)
		}
	}
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	if cfg.CommandCost != 5*time.Millisecond || cfg.CostByKind["ping"] != 2*time.Millisecond || len(cfg.Capabilities) != len(OldCapabilities()) {
		t.Errorf("config not applied: %+v", cfg)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
	var st Stats
	if err := json.NewDecoder(rec.Body).Decode(&st); err != nil {
		t.Fatalf("stats json: %v", err)
	}
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
