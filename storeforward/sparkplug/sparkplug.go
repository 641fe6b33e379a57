package sparkplug

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/internal/clock"
	"github.com/scadad/scadad/storeforward"
	"github.com/scadad/scadad/storeforward/mqtttarget"
	"github.com/scadad/scadad/storeforward/sparkplug/sparkplugpb"
)

// Name is the kind's name in Target.Kind.
const Name = "sparkplug"

// Namespace is the first topic level of Sparkplug B.
const Namespace = "spBv1.0"

// The node metrics of NBIRTH.
const (
	MetricBdSeq   = "bdSeq"
	MetricRebirth = "Node Control/Rebirth"
)

// Settings are a Sparkplug target's own settings (Target.Settings).
type Settings struct {
	// Connection is the broker and its credentials (its Topic is unused:
	// Sparkplug makes the topics).
	Connection mqtttarget.Settings
	// GroupID and EdgeNode name the Edge Node: topics
	// spBv1.0/<GroupID>/<type>/<EdgeNode>[/<device>].
	GroupID, EdgeNode string
	// PrimaryHost is the primary host application's id: with it set, the
	// node publishes only while spBv1.0/STATE/<PrimaryHost> says online.
	PrimaryHost string
	// Devices are the devices and metrics every DBIRTH declares, in
	// alias order (aliases are numbered from 1 in this order, so they
	// are the same on every node). A metric a message holds beyond them
	// is added, with the next alias, by a new DBIRTH of its device.
	Devices []Device
	// KeepAlive is the MQTT keep-alive (default 20 s): a node cut off
	// from the broker without closing its connection is declared dead
	// (its NDEATH published) after 1.5 times it.
	KeepAlive time.Duration
}

// Device is one device (an instance) and its metrics (its attributes).
type Device struct {
	Name    string
	Metrics []Metric
}

// Metric is one metric of a device.
type Metric struct {
	Name string
	Type sparkplugpb.DataType
}

// BirthCounter hands out the bdSeq of each new Edge Node session.
type BirthCounter interface {
	// NextBirth is the bdSeq of a new session of target's Edge Node: one
	// more (modulo 256) than the last one handed out for it on any node,
	// so that a host application tells the NDEATH of an earlier session
	// (the will of a node that died) from the current one's.
	NextBirth(ctx context.Context, target string) (uint8, error)
}

// Kind implements storeforward.Kind.
type Kind struct {
	// Births keeps bdSeq (the daemon: in the replicated state). Nil counts
	// in the worker from the epoch's term, which a new Active node does
	// not continue exactly (tests and single nodes).
	Births BirthCounter
	Clock  clock.Clock
}

func settingsOf(t storeforward.Target) (Settings, error) {
	s, ok := t.Settings.(Settings)
	if !ok {
		return Settings{}, fmt.Errorf("target %s: sparkplug settings missing (got %T)", t.Name, t.Settings)
	}
	return s, nil
}

// ValidID reports whether id may be a Sparkplug group, edge node, device
// or host id: not empty, and none of '/', '+', '#'.
func ValidID(id string) bool { return id != "" && !strings.ContainsAny(id, "/+#\x00") }

// Validate implements storeforward.Kind.
func (Kind) Validate(t storeforward.Target) error {
	s, err := settingsOf(t)
	if err != nil {
		return err
	}
	if err := s.Connection.ValidateConnection(t.Name); err != nil {
		return err
	}
	for _, id := range []struct{ what, v string }{{"group id", s.GroupID}, {"edge node", s.EdgeNode}} {
		if !ValidID(id.v) {
			return fmt.Errorf("target %s: %s %q: want a non-empty topic level without / + #", t.Name, id.what, id.v)
		}
	}
	if s.PrimaryHost != "" && !ValidID(s.PrimaryHost) {
		return fmt.Errorf("target %s: primary host %q: want a topic level without / + #", t.Name, s.PrimaryHost)
	}
	for _, d := range s.Devices {
		if !ValidID(d.Name) {
			return fmt.Errorf("target %s: device %q: want a topic level without / + #", t.Name, d.Name)
		}
	}
	return nil
}

// NewSender implements storeforward.Kind. It connects on the first Send.
func (k Kind) NewSender(t storeforward.Target, env storeforward.SenderEnv) (storeforward.Sender, error) {
	s, err := settingsOf(t)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s.Connection.Broker)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	tlsCfg, err := s.Connection.TLSConfig(u)
	if err != nil {
		return nil, err
	}
	if s.KeepAlive <= 0 {
		s.KeepAlive = 20 * time.Second
	}
	births := k.Births
	if births == nil {
		births = &localBirths{next: uint8(env.Epoch.Term)}
	}
	clk := k.Clock
	if clk == nil {
		clk = clock.System()
	}
	sd := &sender{target: t.Name, node: env.NodeID, set: s, url: u, tls: tlsCfg, births: births, clock: clk, log: env.Logger,
		devices: map[string]*device{}}
	for _, d := range s.Devices {
		dev := sd.device(d.Name)
		dev.configured = true
		for _, m := range d.Metrics {
			dev.metric(m.Name, m.Type, &sd.lastAlias)
		}
	}
	return sd, nil
}

// localBirths counts bdSeq in one worker.
type localBirths struct {
	mu   sync.Mutex
	next uint8
}

func (l *localBirths) NextBirth(context.Context, string) (uint8, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.next
	l.next++
	return b, nil
}

type sender struct {
	target, node string
	set          Settings
	url          *url.URL
	tls          *tls.Config
	births       BirthCounter
	clock        clock.Clock
	log          zerolog.Logger

	// mu makes Sends one at a time: seq is the order of publishing.
	mu        sync.Mutex
	sess      *session
	devices   map[string]*device
	order     []*device
	lastAlias uint64
}

type device struct {
	name    string
	metrics []*metric
	byName  map[string]*metric
	// configured: the settings list it. Another device is one whose
	// values outlived its place in the site config (its instance removed
	// by a deploy): born only to publish those, then dead (DDEATH).
	configured bool
}

type metric struct {
	name  string
	alias uint64
	dt    sparkplugpb.DataType
	// last is the last value published (for the births of a new
	// session); nil before the first.
	last *sparkplugpb.Payload_Metric
}

func (s *sender) device(name string) *device {
	d := s.devices[name]
	if d == nil {
		d = &device{name: name, byName: map[string]*metric{}}
		s.devices[name] = d
		s.order = append(s.order, d)
	}
	return d
}

func (d *device) metric(name string, dt sparkplugpb.DataType, lastAlias *uint64) *metric {
	m := d.byName[name]
	if m == nil {
		*lastAlias++
		m = &metric{name: name, alias: *lastAlias, dt: dt}
		d.byName[name] = m
		d.metrics = append(d.metrics, m)
	}
	return m
}

func (s *sender) topic(kind string, device string) string {
	t := Namespace + "/" + s.set.GroupID + "/" + kind + "/" + s.set.EdgeNode
	if device != "" {
		t += "/" + device
	}
	return t
}

// session is one MQTT connection of the Edge Node, from its CONNECT (with
// the NDEATH of bdSeq as its will) to its end.
type session struct {
	client *paho.Client
	conn   net.Conn
	bdSeq  uint8
	// seq is the seq of the next publish after the NBIRTH.
	seq  uint8
	born map[string]bool // NBIRTH ("") and the devices' DBIRTHs published
	// declared holds the metrics the session's DBIRTHs declared.
	declared map[*metric]bool

	mu          sync.Mutex
	hostOnline  bool
	rebirth     bool
	failed      error
	changed     chan struct{} // closed and replaced at every change above
	stateTopic  string
	rebirthFrom string
}

func (ss *session) update(f func()) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f()
	close(ss.changed)
	ss.changed = make(chan struct{})
}

func (ss *session) fail(err error) {
	ss.update(func() {
		if ss.failed == nil {
			ss.failed = err
		}
	})
}

// received handles STATE and NCMD.
func (ss *session) received(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	switch p.Topic {
	case ss.stateTopic:
		online := hostOnline(p.Payload)
		ss.update(func() { ss.hostOnline = online })
	case ss.rebirthFrom:
		cmd := &sparkplugpb.Payload{}
		if proto.Unmarshal(p.Payload, cmd) != nil {
			return true, nil
		}
		for _, m := range cmd.Metrics {
			if m.GetName() == MetricRebirth && m.GetBooleanValue() {
				ss.update(func() { ss.rebirth = true })
			}
		}
	}
	return true, nil
}

// hostOnline reads a STATE payload: Sparkplug 3.0's JSON
// {"online": true, "timestamp": …}, or 2.2's ONLINE / OFFLINE.
func hostOnline(payload []byte) bool {
	var st struct {
		Online bool `json:"online"`
	}
	if json.Unmarshal(payload, &st) == nil {
		return st.Online
	}
	return strings.EqualFold(strings.TrimSpace(string(payload)), "ONLINE")
}

// HostOffline is the error of a Send held while the primary host
// application is offline: a hold, tried again after a second, that never
// counts toward max_attempts (the messages wait in the buffer however
// long the host stays away).
type HostOffline struct{ Host string }

func (e *HostOffline) Error() string {
	return fmt.Sprintf("primary host application %s is offline (STATE): holding publishing, the messages wait in the buffer", e.Host)
}

// Verdict implements storeforward.Refusal.
func (e *HostOffline) Verdict() storeforward.Verdict {
	return storeforward.Verdict{Code: "host_offline", Hold: true, RetryAfter: time.Second}
}

// BadPayload is a message that is not a Sparkplug tag history payload: it
// parks at once, whatever park_on says (no broker answered it).
type BadPayload struct {
	ID  string
	Err error
}

func (e *BadPayload) Error() string {
	return fmt.Sprintf("message %s is not a Sparkplug history payload: %v", e.ID, e.Err)
}

// Verdict implements storeforward.Refusal.
func (e *BadPayload) Verdict() storeforward.Verdict {
	return storeforward.Verdict{Code: "payload", Permanent: true, Unsendable: true}
}

func (s *sender) connect(ctx context.Context) (*session, error) {
	var (
		conn net.Conn
		err  error
	)
	if s.tls != nil {
		d := tls.Dialer{Config: s.tls}
		conn, err = d.DialContext(ctx, "tcp", s.url.Host)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", s.url.Host)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", s.url.Redacted(), err)
	}
	conn = packets.NewThreadSafeConn(conn)
	// A bdSeq per CONNECT sent, as Sparkplug counts: a broker that cannot
	// be reached uses none.
	bdSeq, err := s.births.NextBirth(ctx, s.target)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("next bdSeq: %w", err)
	}
	ss := &session{conn: conn, bdSeq: bdSeq, born: map[string]bool{}, declared: map[*metric]bool{}, changed: make(chan struct{}),
		rebirthFrom: s.topic("NCMD", ""), hostOnline: s.set.PrimaryHost == ""}
	if s.set.PrimaryHost != "" {
		ss.stateTopic = Namespace + "/STATE/" + s.set.PrimaryHost
	}
	ss.client = paho.NewClient(paho.ClientConfig{
		ClientID: mqtttarget.ClientID(s.node, s.target), Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){ss.received},
		OnClientError:     func(err error) { ss.fail(fmt.Errorf("connection to %s: %w", s.url.Redacted(), err)) },
		OnServerDisconnect: func(d *paho.Disconnect) {
			ss.fail(fmt.Errorf("broker %s disconnected the node: reason code 0x%02x", s.url.Redacted(), d.ReasonCode))
		},
	})
	will, err := proto.Marshal(&sparkplugpb.Payload{Timestamp: s.now(), Metrics: []*sparkplugpb.Payload_Metric{bdSeqMetric(bdSeq)}})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("encode NDEATH: %w", err)
	}
	cp := &paho.Connect{
		ClientID: mqtttarget.ClientID(s.node, s.target), CleanStart: true, KeepAlive: uint16(max(s.set.KeepAlive/time.Second, 1)),
		WillMessage: &paho.WillMessage{QoS: 1, Topic: s.topic("NDEATH", ""), Payload: will},
	}
	if s.set.Connection.Username != "" {
		cp.Username, cp.UsernameFlag = s.set.Connection.Username, true
	}
	if cp.Password, cp.PasswordFlag, err = s.set.Connection.Password(); err != nil {
		conn.Close()
		return nil, err
	}
	ack, err := ss.client.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		if ack != nil {
			reason := ""
			if ack.Properties != nil {
				reason = ack.Properties.ReasonString
			}
			return nil, fmt.Errorf("connect to %s: broker refused with reason code 0x%02x %s", s.url.Redacted(), ack.ReasonCode, reason)
		}
		return nil, fmt.Errorf("connect to %s: %w", s.url.Redacted(), err)
	}
	subs := []paho.SubscribeOptions{{Topic: ss.rebirthFrom, QoS: 1}}
	if ss.stateTopic != "" {
		subs = append(subs, paho.SubscribeOptions{Topic: ss.stateTopic, QoS: 1})
	}
	sa, err := ss.client.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs})
	if err == nil && (len(sa.Reasons) != len(subs) || slices.ContainsFunc(sa.Reasons, func(r byte) bool { return r >= 0x80 })) {
		err = fmt.Errorf("refused with reason codes %v", sa.Reasons)
	}
	if err != nil {
		s.drop(ss)
		return nil, fmt.Errorf("subscribe to %s and %s: %w", ss.rebirthFrom, ss.stateTopic, err)
	}
	s.log.Info().Str("target", s.target).Uint8("bd_seq", bdSeq).Msg("sparkplug edge node connected")
	return ss, nil
}

// drop closes a session's connection without NDEATH: the broker publishes
// the will.
func (s *sender) drop(ss *session) {
	_ = ss.conn.Close()
	if s.sess == ss {
		s.sess = nil
	}
}

// end publishes the session's NDEATH and disconnects cleanly (the broker
// then drops the will): the node is leaving, not dying.
func (s *sender) end(ctx context.Context, ss *session) {
	payload, err := proto.Marshal(&sparkplugpb.Payload{Timestamp: s.now(), Metrics: []*sparkplugpb.Payload_Metric{bdSeqMetric(ss.bdSeq)}})
	if err == nil {
		_, err = ss.client.Publish(ctx, &paho.Publish{QoS: 1, Topic: s.topic("NDEATH", ""), Payload: payload})
	}
	if err != nil {
		s.log.Debug().Err(err).Str("target", s.target).Msg("sparkplug NDEATH not published; the broker publishes the will")
		s.drop(ss)
		return
	}
	_ = ss.client.Disconnect(&paho.Disconnect{ReasonCode: 0})
	s.drop(ss)
}

func (s *sender) now() *uint64 { return proto.Uint64(uint64(max(s.clock.Now().UnixMilli(), 0))) }

func bdSeqMetric(bdSeq uint8) *sparkplugpb.Payload_Metric {
	return &sparkplugpb.Payload_Metric{Name: proto.String(MetricBdSeq), Datatype: proto.Uint32(uint32(sparkplugpb.DataType_Int64)),
		Value: &sparkplugpb.Payload_Metric_LongValue{LongValue: uint64(bdSeq)}}
}

// ready waits until the session may publish: the primary host online (or
// none configured). A session whose connection failed is dropped.
func (s *sender) ready(ctx context.Context, ss *session) error {
	for {
		ss.mu.Lock()
		failed, online, changed := ss.failed, ss.hostOnline, ss.changed
		ss.mu.Unlock()
		switch {
		case failed != nil:
			s.drop(ss)
			return failed
		case online:
			return nil
		case ss.born[""]:
			// The host went away during the session: Sparkplug has the
			// node end it (NDEATH) and wait on a new one.
			s.end(ctx, ss)
			return &HostOffline{Host: s.set.PrimaryHost}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return &HostOffline{Host: s.set.PrimaryHost}
		}
	}
}

func (s *sender) publish(ctx context.Context, ss *session, kind, device string, p *sparkplugpb.Payload) error {
	if kind == "NBIRTH" {
		ss.seq = 0
	}
	p.Seq, p.Timestamp = proto.Uint64(uint64(ss.seq)), s.now()
	b, err := proto.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode %s: %w", kind, err)
	}
	topic := s.topic(kind, device)
	resp, err := ss.client.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: b})
	if err == nil && resp != nil && resp.ReasonCode >= 0x80 {
		err = fmt.Errorf("broker answered reason code 0x%02x", resp.ReasonCode)
	}
	if err != nil {
		s.drop(ss)
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("publish %s: no PUBACK in time", topic)
		}
		return fmt.Errorf("publish %s: %w", topic, err)
	}
	ss.seq++ // 255 wraps to 0, as Sparkplug's seq does
	return nil
}

func (s *sender) birth(ctx context.Context, ss *session) error {
	nb := &sparkplugpb.Payload{Metrics: []*sparkplugpb.Payload_Metric{bdSeqMetric(ss.bdSeq),
		{Name: proto.String(MetricRebirth), Datatype: proto.Uint32(uint32(sparkplugpb.DataType_Boolean)),
			Value: &sparkplugpb.Payload_Metric_BooleanValue{BooleanValue: false}}}}
	clear(ss.born)
	clear(ss.declared)
	if err := s.publish(ctx, ss, "NBIRTH", "", nb); err != nil {
		return err
	}
	ss.born[""] = true
	for _, d := range s.order {
		if !d.configured || !d.live() {
			continue // born only by values of its own
		}
		if err := s.deviceBirth(ctx, ss, d, nil); err != nil {
			return err
		}
	}
	return nil
}

// deviceBirth publishes d's DBIRTH: every metric with its current value,
// the one in current if it holds the metric, else the last published.
func (s *sender) deviceBirth(ctx context.Context, ss *session, d *device, current map[*metric]*sparkplugpb.Payload_Metric) error {
	p := &sparkplugpb.Payload{Metrics: make([]*sparkplugpb.Payload_Metric, 0, len(d.metrics))}
	for _, m := range d.metrics {
		bm := &sparkplugpb.Payload_Metric{}
		value := m.last
		if v := current[m]; v != nil {
			value = v
		}
		if value != nil {
			bm = proto.Clone(value).(*sparkplugpb.Payload_Metric)
		} else {
			bm.IsNull, bm.Timestamp = proto.Bool(true), s.now()
		}
		bm.Name, bm.Alias, bm.Datatype = proto.String(m.name), proto.Uint64(m.alias), proto.Uint32(uint32(m.dt))
		p.Metrics = append(p.Metrics, bm)
		ss.declared[m] = true
	}
	if err := s.publish(ctx, ss, "DBIRTH", d.name, p); err != nil {
		return err
	}
	ss.born[d.name] = true
	return nil
}

// deviceData is one device's part of a message.
type deviceData struct {
	dev     *device
	metrics []*sparkplugpb.Payload_Metric
	known   []*metric
}

// split groups a message's metrics by device, in order of first
// appearance, learning metrics the settings did not list.
func (s *sender) split(m *storeforward.Message) ([]*deviceData, error) {
	ct := ""
	for _, h := range m.Headers {
		if strings.EqualFold(h.Key, "Content-Type") {
			ct = h.Value
		}
	}
	if ct != storeforward.SparkplugContentType {
		return nil, &BadPayload{ID: m.ID, Err: fmt.Errorf("Content-Type %q, want %s (a tag history rule of format sparkplug)", ct, storeforward.SparkplugContentType)}
	}
	p := &sparkplugpb.Payload{}
	if err := proto.Unmarshal(m.Payload, p); err != nil {
		return nil, &BadPayload{ID: m.ID, Err: err}
	}
	var out []*deviceData
	at := map[string]*deviceData{}
	for _, pm := range p.Metrics {
		inst, attr, ok := storeforward.SplitSparkplugMetricName(pm.GetName())
		if !ok || !ValidID(inst) || attr == "" {
			return nil, &BadPayload{ID: m.ID, Err: fmt.Errorf("metric %q: want <instance>/<attribute>", pm.GetName())}
		}
		dd := at[inst]
		if dd == nil {
			dd = &deviceData{dev: s.device(inst)}
			at[inst] = dd
			out = append(out, dd)
		}
		dd.metrics = append(dd.metrics, pm)
		dd.known = append(dd.known, dd.dev.metric(attr, sparkplugpb.DataType(pm.GetDatatype()), &s.lastAlias))
	}
	return out, nil
}

// Send implements storeforward.Sender: each message goes out as one DDATA
// per device it holds, after the births its session still owes.
func (s *sender) Send(ctx context.Context, batch []*storeforward.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := make([][]*deviceData, len(batch))
	for i, m := range batch {
		dd, err := s.split(m)
		if err != nil {
			return err
		}
		parts[i] = dd
	}
	if s.sess == nil {
		ss, err := s.connect(ctx)
		if err != nil {
			return err
		}
		s.sess = ss
	}
	ss := s.sess
	if err := s.ready(ctx, ss); err != nil {
		return err
	}
	ss.mu.Lock()
	rebirth := ss.rebirth
	ss.rebirth = false
	ss.mu.Unlock()
	if !ss.born[""] || rebirth {
		if err := s.birth(ctx, ss); err != nil {
			return err
		}
	}
	if err := s.buryUnconfigured(ctx, ss, parts); err != nil {
		return err
	}
	for _, msg := range parts {
		for _, dd := range msg {
			if err := s.ready(ctx, ss); err != nil {
				return err
			}
			if err := s.publishPart(ctx, ss, dd); err != nil {
				return err
			}
		}
	}
	return nil
}

// publishPart publishes one device's part of a message. A part after
// which every value of the device says its data source is lost
// (storeforward.SparkplugSourceLost: the instance's field connection went
// bad) kills the device: its other values go out, then its DDEATH, and
// the host takes its metrics for stale; nothing more of it is published
// until a value of a live source births it again. The decision rests on
// the values in the buffer alone, so a new Active node that delivers the
// same messages decides the same; its new session births only devices
// that a value of a live source has reached (never one whose source is
// lost, which the old session's NDEATH left dead).
func (s *sender) publishPart(ctx context.Context, ss *session, dd *deviceData) error {
	lost := dd.leavesSourceLost()
	values := dd
	if lost {
		values = dd.without(storeforward.SparkplugSourceLost)
	}
	if len(values.metrics) > 0 {
		if err := s.publishValues(ctx, ss, values); err != nil {
			return err
		}
	}
	for i, pm := range dd.metrics {
		dd.known[i].last = pm
	}
	if lost && ss.born[dd.dev.name] {
		if err := s.publish(ctx, ss, "DDEATH", dd.dev.name, &sparkplugpb.Payload{}); err != nil {
			return err
		}
		delete(ss.born, dd.dev.name)
	}
	return nil
}

// publishValues publishes dd's values as DDATA. A device not born in the
// session is born by them: its DBIRTH carries each metric's first value
// in dd (Sparkplug: a DBIRTH holds the current values), the DDATA the
// later ones. A metric its DBIRTH did not declare births it again.
func (s *sender) publishValues(ctx context.Context, ss *session, dd *deviceData) error {
	switch {
	case !ss.born[dd.dev.name]:
		first, rest := dd.firstValues()
		if err := s.deviceBirth(ctx, ss, dd.dev, first); err != nil {
			return err
		}
		dd = rest
	case !s.declared(ss, dd):
		if err := s.deviceBirth(ctx, ss, dd.dev, nil); err != nil {
			return err
		}
	}
	if len(dd.metrics) == 0 {
		return nil
	}
	data := &sparkplugpb.Payload{Metrics: make([]*sparkplugpb.Payload_Metric, len(dd.metrics))}
	for i, pm := range dd.metrics {
		out := proto.Clone(pm).(*sparkplugpb.Payload_Metric)
		out.Name, out.Alias = nil, proto.Uint64(dd.known[i].alias)
		data.Metrics[i] = out
	}
	return s.publish(ctx, ss, "DDATA", dd.dev.name, data)
}

// live reports whether the device's last values tell of a live data
// source: one of them does not say it is lost.
func (d *device) live() bool {
	for _, m := range d.metrics {
		if m.last != nil && !storeforward.SparkplugSourceLost(m.last) {
			return true
		}
	}
	return false
}

// leavesSourceLost reports whether, with dd's values taken, every metric
// of its device that has a value holds one saying its source is lost.
func (dd *deviceData) leavesSourceLost() bool {
	final := make(map[*metric]*sparkplugpb.Payload_Metric, len(dd.known))
	for i, m := range dd.known {
		final[m] = dd.metrics[i]
	}
	lost := false
	for _, m := range dd.dev.metrics {
		v := m.last
		if f := final[m]; f != nil {
			v = f
		}
		if v == nil {
			continue
		}
		if !storeforward.SparkplugSourceLost(v) {
			return false
		}
		lost = true
	}
	return lost
}

// without is dd without the values drop reports.
func (dd *deviceData) without(drop func(*sparkplugpb.Payload_Metric) bool) *deviceData {
	out := &deviceData{dev: dd.dev}
	for i, pm := range dd.metrics {
		if !drop(pm) {
			out.metrics = append(out.metrics, pm)
			out.known = append(out.known, dd.known[i])
		}
	}
	return out
}

// firstValues splits dd into each metric's first value and the values
// after it, in order.
func (dd *deviceData) firstValues() (map[*metric]*sparkplugpb.Payload_Metric, *deviceData) {
	first := make(map[*metric]*sparkplugpb.Payload_Metric, len(dd.known))
	rest := &deviceData{dev: dd.dev}
	for i, pm := range dd.metrics {
		if m := dd.known[i]; first[m] == nil {
			first[m] = pm
		} else {
			rest.metrics = append(rest.metrics, pm)
			rest.known = append(rest.known, m)
		}
	}
	return first, rest
}

// buryUnconfigured publishes the DDEATH of every born device the settings
// do not list and the batch about to be published holds no values of:
// its values still in the buffer are published (one message of them
// after another, without a death and birth between each), and Sparkplug
// has the Edge Node announce a device that is gone (a host keeps a device
// online until its DDEATH or the node's NDEATH).
func (s *sender) buryUnconfigured(ctx context.Context, ss *session, parts [][]*deviceData) error {
	for _, d := range s.order {
		if d.configured || !ss.born[d.name] || slices.ContainsFunc(parts, func(msg []*deviceData) bool {
			return slices.ContainsFunc(msg, func(dd *deviceData) bool { return dd.dev == d })
		}) {
			continue
		}
		if err := s.publish(ctx, ss, "DDEATH", d.name, &sparkplugpb.Payload{}); err != nil {
			return err
		}
		delete(ss.born, d.name)
	}
	return nil
}

// declared reports whether every metric of dd was in its device's DBIRTH
// of this session (a metric learned since needs a new DBIRTH).
func (s *sender) declared(ss *session, dd *deviceData) bool {
	for _, m := range dd.known {
		if !ss.declared[m] {
			return false
		}
	}
	return true
}

// Close implements storeforward.Sender: the session ends with its NDEATH.
func (s *sender) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.end(ctx, s.sess)
		cancel()
	}
}
