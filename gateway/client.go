package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/scadad/scadad/field"
	pb "github.com/scadad/scadad/gateway/gatewaypb"
	"github.com/scadad/scadad/internal/backoff"
	"github.com/scadad/scadad/internal/grpcdial"
	"github.com/scadad/scadad/role"
)

// Defaults for Config fields left zero.
const (
	DefaultCommandTimeout    = 60 * time.Second
	DefaultAdviseParallelism = 16
	DefaultProbeInterval     = 5 * time.Second
	DefaultProbeTimeout      = 5 * time.Second
	DefaultReconnectFloor    = 500 * time.Millisecond
	DefaultReconnectMax      = 30 * time.Second
)

// ErrNotConnected is returned by commands issued while no session is open.
var ErrNotConnected = errors.New("gateway: no session")

// Handler receives what the client learns asynchronously. Calls for one
// client are never concurrent with each other.
type Handler interface {
	// DataChange is one value update for an item this client subscribed.
	DataChange(DataChange)
	// ConnectionState reports a change of session or health.
	ConnectionState(State)
}

// State is the client's connection state.
type State struct {
	// Good is true while a session is open and answers probes.
	Good bool
	// Session counts sessions opened by this client; a new value means every
	// item handle from before is gone and subscriptions must be redone.
	Session uint64
}

// Config configures a Client. Zero values take the defaults above.
type Config struct {
	// Name labels logs and metrics (the connection name).
	Name     string
	Endpoint string
	// ClientName is sent at OpenSession.
	ClientName string
	// CommandTimeout is sent as the session command timeout. Negative sends
	// none and leaves the gateway default (the pre-Lever-3 behaviour).
	CommandTimeout time.Duration
	// WriteUserID 0 means supervisory mode: items are advised supervisory.
	WriteUserID int32
	// AdviseParallelism bounds the legacy per-item AdviseSupervisory pipeline.
	AdviseParallelism int
	// LegacySubscribe keeps to AddItemBulk plus per-item AdviseSupervisory
	// even when the gateway advertises bulk-subscribe-supervisory (the site
	// config's prefer_bulk_supervisory: false).
	LegacySubscribe bool
	// ProbeInterval is how often a Ping checks that the session's apartment
	// answers; negative disables probing.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// ReconnectFloor and ReconnectMax bound the reconnect backoff (×2, ±20 %).
	ReconnectFloor time.Duration
	ReconnectMax   time.Duration
	// DialOptions default to an insecure transport.
	DialOptions []grpc.DialOption
	// Epoch supplies the fencing epoch for writes whose context carries none
	// (see WithEpoch). Without either, Write refuses.
	Epoch func() (role.Epoch, bool)
	// Handler may be nil.
	Handler Handler
	// Metrics may be nil.
	Metrics *Metrics
	Logger  zerolog.Logger
	// Rand returns a uniform sample in [0,1) for jitter; nil uses math/rand.
	Rand func() float64
}

// ItemResult is one tag's outcome of a subscribe, in request order.
type ItemResult struct {
	Tag    string
	Handle int32
	// Err is nil when the tag is added and advised.
	Err error
	// Transient marks an Err worth retrying (deadline, lost session) as
	// opposed to a rejection of the tag itself.
	Transient bool
}

// Client talks to one gateway. Run keeps it connected; the other methods
// use whatever session is open at the time.
type Client struct {
	cfg  Config
	log  zerolog.Logger
	conn *grpc.ClientConn
	api  pb.MxAccessGatewayClient

	corr atomic.Uint64
	gen  atomic.Uint64

	mu       sync.Mutex
	sess     *liveSession
	good     bool
	reported State

	handlerMu sync.Mutex
}

type liveSession struct {
	id              string
	serverHandle    int32
	gen             uint64
	caps            map[string]bool
	bulkSupervisory bool
	lost            chan struct{}
	lostOnce        sync.Once
	handlesMu       sync.Mutex
	handles         map[int32]string
	// early holds the newest data change for handles not (yet) remembered:
	// the gateway sends an item's first value when it advises it, which can
	// overtake the reply that tells us the handle.
	early map[int32]*pb.DataChange
}

// maxEarly bounds the early-event buffer per session.
const maxEarly = 65536

func (s *liveSession) markLost() { s.lostOnce.Do(func() { close(s.lost) }) }

// New validates cfg and prepares a client; it does not connect.
func New(cfg Config) (*Client, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("gateway client: endpoint is empty")
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Endpoint
	}
	if cfg.ClientName == "" {
		cfg.ClientName = "scadad"
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	if cfg.AdviseParallelism <= 0 {
		cfg.AdviseParallelism = DefaultAdviseParallelism
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.ReconnectFloor <= 0 {
		cfg.ReconnectFloor = DefaultReconnectFloor
	}
	if cfg.ReconnectMax < cfg.ReconnectFloor {
		cfg.ReconnectMax = max(DefaultReconnectMax, cfg.ReconnectFloor)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	// Redial a gateway that is down about a second apart (the caller's
	// options may say otherwise). grpc's default backoff grows to two
	// minutes, and while it waits every OpenSession fails at once with the
	// last dial error: a gateway back after a few minutes' outage waited up
	// to two minutes for its session, whatever ReconnectMax says.
	opts := []grpc.DialOption{grpc.WithConnectParams(grpcdial.ConnectParams(5 * time.Second))}
	if len(cfg.DialOptions) == 0 {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	opts = append(opts, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway client %s: dial %s: %w", cfg.Name, cfg.Endpoint, err)
	}
	return &Client{
		cfg:  cfg,
		log:  cfg.Logger.With().Str("connection", cfg.Name).Logger(),
		conn: conn,
		api:  pb.NewMxAccessGatewayClient(conn),
	}, nil
}

// Close releases the transport. Call it after Run has returned.
func (c *Client) Close() error { return c.conn.Close() }

// Capabilities returns the capability set of the open session, nil if none.
func (c *Client) Capabilities() map[string]bool {
	s := c.current()
	if s == nil {
		return nil
	}
	return s.caps
}

// State returns the current connection state.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := State{Good: c.good}
	if c.sess != nil {
		st.Session = c.sess.gen
	}
	return st
}

func (c *Client) current() *liveSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

// Run opens a session, keeps its event stream and health probe going and
// reopens it with backoff whenever it is lost, until ctx ends. It closes the
// session on the way out.
func (c *Client) Run(ctx context.Context) error {
	if c.cfg.Metrics != nil {
		// No session yet. Present from the start, so a gateway that never
		// answers reads 0 (and can be alerted on) rather than being absent.
		c.cfg.Metrics.connected.WithLabelValues(c.cfg.Name).Set(0)
		// Gone once the client stops (its connection removed or renamed by
		// a deploy, or the node no longer Active): a 0 left behind would
		// read as a gateway that is down until the process restarts.
		defer c.cfg.Metrics.connected.DeleteLabelValues(c.cfg.Name)
	}
	delay := c.cfg.ReconnectFloor
	for {
		sess, err := c.open(ctx)
		if err == nil {
			delay = c.cfg.ReconnectFloor
			c.serve(ctx, sess)
			c.drop(sess)
			if ctx.Err() != nil {
				c.closeSession(sess)
				return nil
			}
			c.log.Warn().Str("session", sess.id).Dur("next_attempt_in", delay).Msg("gateway session lost; reconnecting")
		} else {
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn().Err(err).Dur("next_attempt_in", delay).Msg("gateway open session failed")
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = backoff.Next(delay, c.cfg.ReconnectFloor, c.cfg.ReconnectMax, c.cfg.Rand())
	}
}

func (c *Client) open(ctx context.Context) (*liveSession, error) {
	req := &pb.OpenSessionRequest{ClientName: c.cfg.ClientName, ClientVersion: "scadad", WriteUserId: c.cfg.WriteUserID}
	if c.cfg.CommandTimeout > 0 {
		req.CommandTimeout = durationpb.New(c.cfg.CommandTimeout)
	}
	octx, cancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout+c.cfg.ReconnectMax)
	defer cancel()
	rep, err := c.api.OpenSession(octx, req)
	if err != nil {
		return nil, fmt.Errorf("open session on %s: %w", c.cfg.Endpoint, err)
	}
	s := &liveSession{
		id:           rep.GetSessionId(),
		serverHandle: rep.GetServerHandle(),
		gen:          c.gen.Add(1),
		caps:         make(map[string]bool, len(rep.GetCapabilities())),
		lost:         make(chan struct{}),
		handles:      make(map[int32]string),
		early:        make(map[int32]*pb.DataChange),
	}
	for _, cp := range rep.GetCapabilities() {
		s.caps[cp] = true
	}
	s.bulkSupervisory = s.caps[CapBulkSubscribeSupervisory] && !c.cfg.LegacySubscribe
	echoed := rep.GetDefaultCommandTimeout().AsDuration()
	ev := c.log.Info()
	if c.cfg.CommandTimeout > 0 && echoed != c.cfg.CommandTimeout {
		// The gateway clamped or ignored what we asked for: make it visible.
		ev = c.log.Warn()
	}
	requested := "gateway default"
	if c.cfg.CommandTimeout > 0 {
		requested = c.cfg.CommandTimeout.String()
	}
	ev.Str("session", s.id).Str("requested_command_timeout", requested).
		Dur("gateway_command_timeout", echoed).
		Int32("gateway_protocol_version", rep.GetGatewayProtocolVersion()).
		Strs("capabilities", rep.GetCapabilities()).
		Bool("bulk_subscribe_supervisory", s.bulkSupervisory).
		Msg("gateway session open")
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.sessionsOpened.WithLabelValues(c.cfg.Name).Inc()
	}
	c.mu.Lock()
	c.sess = s
	c.mu.Unlock()
	c.setGood(s, true)
	return s, nil
}

// drop forgets a lost session and reports the connection bad.
func (c *Client) drop(s *liveSession) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
	}
	c.mu.Unlock()
	c.setGood(s, false)
}

func (c *Client) closeSession(s *liveSession) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ProbeTimeout)
	defer cancel()
	if _, err := c.api.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: s.id}); err != nil {
		c.log.Debug().Err(err).Str("session", s.id).Msg("close gateway session")
	}
}

func (c *Client) setGood(s *liveSession, good bool) {
	st := State{Good: good, Session: s.gen}
	c.mu.Lock()
	changed := c.good != good
	notify := st != c.reported
	c.good = good
	c.reported = st
	c.mu.Unlock()
	if c.cfg.Metrics != nil {
		v := 0.0
		if good {
			v = 1
		}
		c.cfg.Metrics.connected.WithLabelValues(c.cfg.Name).Set(v)
	}
	if changed {
		c.log.Info().Bool("good", good).Str("session", s.id).Msg("gateway connection quality changed")
	}
	if notify {
		c.notifyState(st)
	}
}

func (c *Client) notifyState(st State) {
	if c.cfg.Handler == nil {
		return
	}
	c.handlerMu.Lock()
	defer c.handlerMu.Unlock()
	c.cfg.Handler.ConnectionState(st)
}

// serve runs the event stream and the probe until the session is lost or
// ctx ends.
func (c *Client) serve(ctx context.Context, s *liveSession) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.streamEvents(sctx, s) }()
	go func() { defer wg.Done(); c.streamAlarms(sctx, s) }()
	go func() { defer wg.Done(); c.probe(sctx, s) }()
	select {
	case <-ctx.Done():
	case <-s.lost:
	}
	cancel()
	wg.Wait()
}

// streamEvents keeps one event stream open. A stream the server ends with OK
// is reopened on the same session: a graceful end is not a disconnect.
func (c *Client) streamEvents(ctx context.Context, s *liveSession) {
	c.keepStream(ctx, s, "event", func() error { return c.readStream(ctx, s) })
}

// keepStream runs read (one server stream of session s) until ctx ends:
// a stream that ends gracefully is reopened on the same session (not
// sooner than ReconnectFloor after the last open), one that fails marks
// the session lost.
func (c *Client) keepStream(ctx context.Context, s *liveSession, what string, read func() error) {
	for ctx.Err() == nil {
		started := time.Now()
		err := read()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			c.log.Debug().Str("session", s.id).Msgf("gateway %s stream ended gracefully; reopening on the same session", what)
			if time.Since(started) < c.cfg.ReconnectFloor {
				// Avoid a hot loop against a server that ends every stream at once.
				select {
				case <-ctx.Done():
					return
				case <-time.After(c.cfg.ReconnectFloor):
				}
			}
			continue
		}
		c.log.Warn().Err(err).Str("session", s.id).Msgf("gateway %s stream failed", what)
		s.markLost()
		return
	}
}

func (c *Client) readStream(ctx context.Context, s *liveSession) error {
	stream, err := c.api.StreamEvents(ctx, &pb.StreamEventsRequest{SessionId: s.id})
	if err != nil {
		return fmt.Errorf("open event stream: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receive event: %w", err)
		}
		if d := ev.GetDataChange(); d != nil {
			c.deliver(s, d)
		}
	}
}

func (c *Client) deliver(s *liveSession, d *pb.DataChange) {
	s.handlesMu.Lock()
	tag, ok := s.handles[d.GetItemHandle()]
	if !ok && len(s.early) < maxEarly {
		s.early[d.GetItemHandle()] = d
	}
	s.handlesMu.Unlock()
	if !ok {
		// An item we do not hold (yet): its subscribe reply may still be on
		// the way, or it is a subscribe we gave up on that the gateway ran
		// anyway, or a removed one.
		if c.cfg.Metrics != nil {
			c.cfg.Metrics.orphanEvents.WithLabelValues(c.cfg.Name).Inc()
		}
		return
	}
	c.emit(tag, d)
}

func (c *Client) emit(tag string, d *pb.DataChange) {
	if c.cfg.Handler == nil {
		return
	}
	dc := dataChangeFromProto(d)
	dc.Tag = tag
	c.handlerMu.Lock()
	defer c.handlerMu.Unlock()
	c.cfg.Handler.DataChange(dc)
}

// probe pings the apartment; a probe that fails marks the connection bad
// (the gateway is wedged or gone) and the next success marks it good again.
func (c *Client) probe(ctx context.Context, s *liveSession) {
	if c.cfg.ProbeInterval < 0 {
		return
	}
	t := time.NewTicker(c.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout)
		_, err := c.invokeOn(pctx, s, &pb.MxCommand{Kind: &pb.MxCommand_Ping{Ping: &pb.PingCommand{}}})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.log.Warn().Err(err).Str("session", s.id).Msg("gateway probe failed")
		}
		c.setGood(s, err == nil)
	}
}

// invokeOn sends one command on session s, counting it.
func (c *Client) invokeOn(ctx context.Context, s *liveSession, cmd *pb.MxCommand) (*pb.MxCommandReply, error) {
	kind := CommandKind(cmd)
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.commands.WithLabelValues(c.cfg.Name, kind).Inc()
	}
	req := &pb.MxCommandRequest{
		SessionId:           s.id,
		ClientCorrelationId: strconv.FormatUint(c.corr.Add(1), 10),
		Command:             cmd,
	}
	rep, err := c.api.Invoke(ctx, req)
	if err != nil {
		switch status.Code(err) {
		case codes.DeadlineExceeded:
			if ctx.Err() == nil && c.cfg.Metrics != nil {
				// The gateway's deadline, not ours.
				c.cfg.Metrics.deadlineExceeded.WithLabelValues(c.cfg.Name, kind).Inc()
			}
		case codes.NotFound, codes.Unavailable:
			if ctx.Err() == nil {
				s.markLost()
			}
		}
		return nil, fmt.Errorf("%s on session %s: %w", kind, s.id, err)
	}
	return rep, nil
}

func (c *Client) session() (*liveSession, error) {
	s := c.current()
	if s == nil {
		return nil, fmt.Errorf("gateway %s: %w", c.cfg.Name, ErrNotConnected)
	}
	return s, nil
}

// Ping runs one no-op command through the gateway's apartment.
func (c *Client) Ping(ctx context.Context) error {
	s, err := c.session()
	if err != nil {
		return err
	}
	_, err = c.invokeOn(ctx, s, &pb.MxCommand{Kind: &pb.MxCommand_Ping{Ping: &pb.PingCommand{}}})
	return err
}

// SubscribeTags adds and advises tags and returns one result per tag, in
// order. In supervisory mode it sends one SubscribeBulk(supervisory=true)
// when the gateway advertises bulk-subscribe-supervisory and otherwise the
// legacy AddItemBulk plus per-item AdviseSupervisory, pipelined. Per-tag
// failures are reported per tag; the error is for the call as a whole.
func (c *Client) SubscribeTags(ctx context.Context, tags []string) ([]ItemResult, error) {
	s, err := c.session()
	if err != nil {
		return nil, err
	}
	supervisory := c.cfg.WriteUserID == 0
	if supervisory && !s.bulkSupervisory {
		return c.subscribeLegacy(ctx, s, tags)
	}
	rep, err := c.invokeOn(ctx, s, &pb.MxCommand{Kind: &pb.MxCommand_SubscribeBulk{SubscribeBulk: &pb.SubscribeBulkCommand{
		ServerHandle: s.serverHandle, TagAddresses: tags, Supervisory: supervisory,
	}}})
	if err != nil {
		return nil, fmt.Errorf("subscribe %d tags: %w", len(tags), err)
	}
	if c.current() != s {
		return nil, fmt.Errorf("subscribe %d tags: session %s was replaced meanwhile", len(tags), s.id)
	}
	return c.mapItems(s, tags, rep.GetSubscribeBulk().GetItems())
}

func (c *Client) mapItems(s *liveSession, tags []string, items []*pb.ItemStatus) ([]ItemResult, error) {
	if len(items) != len(tags) {
		return nil, fmt.Errorf("subscribe %d tags: gateway answered %d items", len(tags), len(items))
	}
	out := make([]ItemResult, len(tags))
	for i, it := range items {
		out[i] = ItemResult{Tag: tags[i], Handle: it.GetItemHandle()}
		if !it.GetOk() {
			out[i] = ItemResult{Tag: tags[i], Err: fmt.Errorf("tag %q: %s", tags[i], it.GetError())}
		}
	}
	c.remember(s, out)
	return out, nil
}

// remember records the handles of successful items so their data changes
// can be routed; failed items hold no handle.
func (c *Client) remember(s *liveSession, results []ItemResult) {
	type early struct {
		tag string
		d   *pb.DataChange
	}
	var replay []early
	s.handlesMu.Lock()
	for _, r := range results {
		if r.Err == nil {
			s.handles[r.Handle] = r.Tag
			if d, ok := s.early[r.Handle]; ok {
				replay = append(replay, early{r.Tag, d})
			}
		}
		delete(s.early, r.Handle)
	}
	s.handlesMu.Unlock()
	for _, e := range replay {
		c.emit(e.tag, e.d)
	}
}

// subscribeLegacy is the pre-Lever-2 path: 1 AddItemBulk + N AdviseSupervisory.
func (c *Client) subscribeLegacy(ctx context.Context, s *liveSession, tags []string) ([]ItemResult, error) {
	rep, err := c.invokeOn(ctx, s, &pb.MxCommand{Kind: &pb.MxCommand_AddItemBulk{AddItemBulk: &pb.AddItemBulkCommand{
		ServerHandle: s.serverHandle, TagAddresses: tags,
	}}})
	if err != nil {
		return nil, fmt.Errorf("add %d items: %w", len(tags), err)
	}
	items := rep.GetAddItemBulk().GetItems()
	if len(items) != len(tags) {
		return nil, fmt.Errorf("add %d items: gateway answered %d", len(tags), len(items))
	}
	out := make([]ItemResult, len(tags))
	sem := make(chan struct{}, c.cfg.AdviseParallelism)
	var wg sync.WaitGroup
	for i, it := range items {
		if !it.GetOk() {
			out[i] = ItemResult{Tag: tags[i], Err: fmt.Errorf("tag %q: %s", tags[i], it.GetError())}
			continue
		}
		out[i] = ItemResult{Tag: tags[i], Handle: it.GetItemHandle()}
		wg.Add(1)
		sem <- struct{}{}
		go func(i int, h int32) {
			defer wg.Done()
			defer func() { <-sem }()
			arep, err := c.invokeOn(ctx, s, &pb.MxCommand{Kind: &pb.MxCommand_AdviseSupervisory{AdviseSupervisory: &pb.AdviseSupervisoryCommand{
				ServerHandle: s.serverHandle, ItemHandle: h,
			}}})
			switch {
			case err != nil:
				out[i] = ItemResult{Tag: tags[i], Err: fmt.Errorf("advise %q: %w", tags[i], err), Transient: true}
			case !arep.GetAdviseSupervisory().GetItem().GetOk():
				out[i] = ItemResult{Tag: tags[i], Err: fmt.Errorf("advise %q: %s", tags[i], arep.GetAdviseSupervisory().GetItem().GetError())}
			}
		}(i, it.GetItemHandle())
	}
	wg.Wait()
	if c.current() != s {
		return nil, fmt.Errorf("subscribe %d tags: session %s was replaced meanwhile", len(tags), s.id)
	}
	// Items whose advise failed are evicted (never remembered) so a later
	// retry re-adds them cleanly, and removed from the gateway: an advise we
	// gave up on may still run on the apartment later.
	c.remember(s, out)
	var unadvised []int32
	for i, it := range items {
		if it.GetOk() && out[i].Err != nil {
			unadvised = append(unadvised, it.GetItemHandle())
		}
	}
	if len(unadvised) > 0 {
		go func() {
			rctx, cancel := context.WithTimeout(context.Background(), c.cfg.ProbeTimeout)
			defer cancel()
			if _, err := c.invokeOn(rctx, s, &pb.MxCommand{Kind: &pb.MxCommand_RemoveItemBulk{RemoveItemBulk: &pb.RemoveItemBulkCommand{
				ServerHandle: s.serverHandle, ItemHandles: unadvised,
			}}}); err != nil {
				c.log.Debug().Err(err).Int("items", len(unadvised)).Msg("remove items whose advise failed")
			}
		}()
	}
	return out, nil
}

// RemoveItems unadvises and removes items by handle. Their data changes stop
// being delivered at once, whatever the gateway answers.
func (c *Client) RemoveItems(ctx context.Context, handles []int32) error {
	if len(handles) == 0 {
		return nil
	}
	s, err := c.session()
	if err != nil {
		return err
	}
	s.handlesMu.Lock()
	for _, h := range handles {
		delete(s.handles, h)
		delete(s.early, h)
	}
	s.handlesMu.Unlock()
	_, err = c.invokeOn(ctx, s, &pb.MxCommand{Kind: &pb.MxCommand_RemoveItemBulk{RemoveItemBulk: &pb.RemoveItemBulkCommand{
		ServerHandle: s.serverHandle, ItemHandles: handles,
	}}})
	if err != nil {
		return fmt.Errorf("remove %d items: %w", len(handles), err)
	}
	return nil
}

// Write writes one tag on the device. The fencing epoch (from ctx via
// WithEpoch, else Config.Epoch) travels in the request metadata; a write
// without an epoch is refused rather than sent unfenced.
func (c *Client) Write(ctx context.Context, tag string, v field.Value) error {
	e, ok := epochFrom(ctx)
	if !ok && c.cfg.Epoch != nil {
		e, ok = c.cfg.Epoch()
	}
	if !ok {
		return fmt.Errorf("write %q: no fencing epoch", tag)
	}
	pv, err := ValueToProto(v)
	if err != nil {
		return fmt.Errorf("write %q: %w", tag, err)
	}
	s, err := c.session()
	if err != nil {
		return fmt.Errorf("write %q: %w", tag, err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, EpochMetadataKey, FormatEpoch(e))
	_, err = c.invokeOn(ctx, s, &pb.MxCommand{Kind: &pb.MxCommand_Write{Write: &pb.WriteCommand{
		ServerHandle: s.serverHandle, TagAddress: tag, Value: pv, UserId: c.cfg.WriteUserID,
	}}})
	if err != nil {
		return fmt.Errorf("write %q at epoch %s: %w", tag, e, err)
	}
	return nil
}

// Read reads one tag's current value.
func (c *Client) Read(ctx context.Context, tag string) (DataChange, error) {
	s, err := c.session()
	if err != nil {
		return DataChange{}, fmt.Errorf("read %q: %w", tag, err)
	}
	rep, err := c.invokeOn(ctx, s, &pb.MxCommand{Kind: &pb.MxCommand_Read{Read: &pb.ReadCommand{
		ServerHandle: s.serverHandle, TagAddress: tag,
	}}})
	if err != nil {
		return DataChange{}, fmt.Errorf("read %q: %w", tag, err)
	}
	r := rep.GetRead()
	return DataChange{Tag: tag, Value: ValueFromProto(r.GetValue()), Quality: field.Quality(r.GetQuality()), Timestamp: r.GetTimestamp().AsTime()}, nil
}
