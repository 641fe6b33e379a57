package mqtttarget

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/scadad/scadad/storeforward"
)

// Name is the kind's name in Target.Kind and the site config.
const Name = "mqtt"

// UserPropertyMessageID is the MQTT 5 user property holding the message id.
const UserPropertyMessageID = "message-id"

// Settings are an MQTT target's own settings (Target.Settings).
type Settings struct {
	// Broker is mqtt://host:port or tls://host:port (mqtts:// and ssl://
	// too).
	Broker string
	// Topic is the topic template: {target}, {node} and {id} are replaced.
	Topic string
	// Username and PasswordFile authenticate (the file is read at every
	// connection); CAFile, CertFile and KeyFile configure TLS.
	Username, PasswordFile    string
	CAFile, CertFile, KeyFile string
	// SessionExpiry keeps the broker's session (and its in-flight
	// messages) across a reconnect; 0: none.
	SessionExpiry time.Duration
	// InFlight bounds the publishes of one batch awaiting their PUBACK at
	// once; 0: the whole batch, as many as the broker's receive maximum
	// lets the client send. They are written in batch order, so a target
	// in strict order (max_in_flight 1) pipelines its batch too.
	InFlight int
	// Protocol is the MQTT version: "5" (or empty) or Protocol311.
	Protocol string
}

// Kind implements storeforward.Kind.
type Kind struct{}

// TLSConfig is the TLS configuration for broker u: nil for a plain
// mqtt:// broker without CA or certificate files.
func (s Settings) TLSConfig(u *url.URL) (*tls.Config, error) {
	if s.CAFile == "" && s.CertFile == "" && u.Scheme != "tls" && u.Scheme != "mqtts" && u.Scheme != "ssl" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read ca_file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", s.CAFile)
		}
	}
	if s.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Password reads the password file (at every connection, so a rotated
// password is used from the next); set is false without one.
func (s Settings) Password() (password []byte, set bool, err error) {
	if s.PasswordFile == "" {
		return nil, false, nil
	}
	b, err := os.ReadFile(s.PasswordFile)
	if err != nil {
		return nil, false, fmt.Errorf("read password_file: %w", err)
	}
	return []byte(strings.TrimRight(string(b), "\r\n")), true, nil
}

// ValidateConnection checks the broker and TLS settings (not the topic).
func (s Settings) ValidateConnection(target string) error {
	u, err := url.Parse(s.Broker)
	if err != nil || u.Host == "" || u.Port() == "" {
		return fmt.Errorf("target %s: broker %q: want mqtt://host:port or tls://host:port", target, s.Broker)
	}
	switch u.Scheme {
	case "mqtt", "tcp", "tls", "mqtts", "ssl":
	default:
		return fmt.Errorf("target %s: broker %q: scheme %q, want mqtt or tls", target, s.Broker, u.Scheme)
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return fmt.Errorf("target %s: cert_file and key_file go together", target)
	}
	return nil
}

func settingsOf(t storeforward.Target) (Settings, error) {
	s, ok := t.Settings.(Settings)
	if !ok {
		return Settings{}, fmt.Errorf("target %s: mqtt settings missing (got %T)", t.Name, t.Settings)
	}
	return s, nil
}

// Validate implements storeforward.Kind.
func (Kind) Validate(t storeforward.Target) error {
	s, err := settingsOf(t)
	if err != nil {
		return err
	}
	if err := s.ValidateConnection(t.Name); err != nil {
		return err
	}
	if s.Topic == "" || strings.ContainsAny(s.Topic, "#+\x00") {
		return fmt.Errorf("target %s: topic %q: want a topic name (no wildcards)", t.Name, s.Topic)
	}
	if s.Protocol != "" && s.Protocol != "5" && s.Protocol != Protocol311 {
		return fmt.Errorf("target %s: protocol %q: want 5 or %s", t.Name, s.Protocol, Protocol311)
	}
	return nil
}

// NewSender implements storeforward.Kind. It connects on the first Send.
func (Kind) NewSender(t storeforward.Target, env storeforward.SenderEnv) (storeforward.Sender, error) {
	s, err := settingsOf(t)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s.Broker)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	tlsCfg, err := s.TLSConfig(u)
	if err != nil {
		return nil, err
	}
	topic := newTopicTemplate(s.Topic, t.Name, env.NodeID)
	if s.Protocol == Protocol311 {
		return &sender311{target: t.Name, node: env.NodeID, set: s, topic: topic, url: u, tls: tlsCfg, timeout: t.Timeout}, nil
	}
	snd := &sender{target: t.Name, node: env.NodeID, set: s, topic: topic, url: u, tls: tlsCfg, timeout: t.Timeout}
	slots := max(t.MaxInFlight, 1)
	snd.free = make(chan *link, slots)
	for slot := range slots {
		l := &link{s: snd, clientID: SlotClientID(env.NodeID, t.Name, slot)}
		snd.links = append(snd.links, l)
		snd.free <- l
	}
	return snd, nil
}

type sender struct {
	target, node string
	set          Settings
	topic        topicTemplate
	url          *url.URL
	tls          *tls.Config
	timeout      time.Duration

	// links are the sender's connections, one for each delivery the
	// target may have under way (max_in_flight): a broker lets a
	// connection have no more than its receive maximum of publishes
	// awaiting their PUBACK (Mosquitto: 20), so deliveries sharing one
	// would share that. A Send takes a free one.
	links []*link
	free  chan *link
}

// link is one connection to the broker and its session.
type link struct {
	s        *sender
	clientID string

	mu     sync.Mutex
	cm     *autopaho.ConnectionManager
	cancel context.CancelFunc
	// down is closed when the current connection drops (a new one is
	// made for the next): without a broker session to resume, a publish
	// awaiting its PUBACK then fails at once.
	down chan struct{}
	// session is the client's session state, through which send
	// publishes (session.go).
	session *publishSession
}

// topicTemplate is a target's topic with {target} and {node} replaced,
// made once: a publish replaces {id} at most.
type topicTemplate struct {
	topic string
	perID bool
}

func newTopicTemplate(template, target, node string) topicTemplate {
	topic := strings.NewReplacer("{target}", target, "{node}", node).Replace(template)
	return topicTemplate{topic: topic, perID: strings.Contains(topic, "{id}")}
}

// of is the topic of message id.
func (t topicTemplate) of(id string) string {
	if !t.perID {
		return t.topic
	}
	return strings.ReplaceAll(t.topic, "{id}", id)
}

// ClientID is the client id a node's worker uses for a target: the node
// is in it, so two Active nodes of a split hold two sessions.
func ClientID(node, target string) string {
	return SlotClientID(node, target, 0)
}

// SlotClientID is the client id of a target's connection for delivery
// slot (0 to max_in_flight-1): ClientID for slot 0, then "-1", "-2"...
func SlotClientID(node, target string, slot int) string {
	suffix := ""
	if slot > 0 {
		suffix = "-" + strconv.Itoa(slot)
	}
	id := "scadad-" + node + "-" + target
	if len(id)+len(suffix) > 128 {
		id = id[:128-len(suffix)]
	}
	return id + suffix
}

// conn is the link's connection manager and session, made on first use.
func (l *link) conn() (*autopaho.ConnectionManager, *publishSession, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cm != nil {
		return l.cm, l.session, nil
	}
	s := l.s
	ctx, cancel := context.WithCancel(context.Background())
	l.session = newPublishSession()
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{s.url},
		KeepAlive:                     20,
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         uint32(s.set.SessionExpiry / time.Second),
		ConnectTimeout:                min(max(s.timeout, time.Second), 10*time.Second),
		ReconnectBackoff:              func(int) time.Duration { return time.Second },
		AttemptConnection: func(ctx context.Context, cfg autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
			defer cancel()
			return dialWire(ctx, u.Host, s.tls)
		},
		OnConnectionDown: func() bool {
			l.mu.Lock()
			close(l.down)
			l.down = make(chan struct{})
			l.mu.Unlock()
			return true
		},
		ConnectPacketBuilder: func(c *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if s.set.Username != "" {
				c.Username, c.UsernameFlag = s.set.Username, true
			}
			pw, set, err := s.set.Password()
			if err != nil {
				return nil, err
			}
			c.Password, c.PasswordFlag = pw, set
			return c, nil
		},
		ClientConfig: paho.ClientConfig{ClientID: l.clientID, Session: l.session},
	}
	l.down = make(chan struct{})
	cm, err := autopaho.NewConnection(ctx, cfg)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	l.cm, l.cancel = cm, cancel
	return cm, l.session, nil
}

// Send implements storeforward.Sender: the batch's messages are published
// at QoS 1 one after another from this goroutine, without awaiting each
// PUBACK, up to InFlight at once (and as many as the broker's receive
// maximum allows: the session blocks beyond it), so the broker reads them
// in batch order; the batch is delivered when every PUBACK says success.
// A publish that cannot be made ends the batch before a later one is.
// Each Send has a connection of its own while it lasts (sender.links).
func (s *sender) Send(ctx context.Context, batch []*storeforward.Message) error {
	if len(batch) == 0 {
		return nil
	}
	var l *link
	select {
	case l = <-s.free:
	case <-ctx.Done():
		return fmt.Errorf("publish %s: no connection free: %w", batch[0].ID, context.Cause(ctx))
	}
	defer func() { s.free <- l }()
	return l.send(ctx, batch)
}

func (l *link) send(ctx context.Context, batch []*storeforward.Message) error {
	s := l.s
	cm, session, err := l.conn()
	if err != nil {
		return err
	}
	if err := cm.AwaitConnection(ctx); err != nil {
		return fmt.Errorf("connect to %s: %w", s.url.Redacted(), err)
	}
	if err := session.allows(1); err != nil {
		return fmt.Errorf("publish to %s: %w", s.url.Redacted(), err)
	}
	if s.set.SessionExpiry == 0 {
		// The broker keeps no session across a reconnect, so nothing
		// resends a publish: its PUBACK will never come once the
		// connection drops (the batch would wait for ctx's deadline).
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		l.mu.Lock()
		down := l.down
		l.mu.Unlock()
		go func() {
			select {
			case <-down:
			case <-ctx.Done():
				return
			}
			// An answer read before the connection dropped (a refusing
			// PUBACK, after which some brokers close) is taken first.
			select {
			case <-time.After(connectionLostGrace):
				cancel(errConnectionLost)
			case <-ctx.Done():
			}
		}()
	}
	window := len(batch)
	if s.set.InFlight > 0 {
		window = min(window, s.set.InFlight)
	}
	acks := make([]chan packets.ControlPacket, 0, len(batch))
	answered := 0
	awaitNext := func() error {
		m := batch[answered]
		select {
		case ack := <-acks[answered]:
			answered++
			return pubackError(m.ID, ack)
		case <-ctx.Done():
			return publishFailed(ctx, m.ID)
		}
	}
	for i, m := range batch {
		for i-answered >= window {
			if err := awaitNext(); err != nil {
				return err
			}
		}
		pub := s.packet(m)
		ack := make(chan packets.ControlPacket, 1)
		if err := session.AddToSession(ctx, pub, ack); err != nil {
			if ctx.Err() != nil {
				return publishFailed(ctx, m.ID)
			}
			return fmt.Errorf("publish %s: %w", m.ID, err)
		}
		// In the session from here: a publish the connection failed to
		// write is resent, in order, when the next one comes up (with a
		// session to resume), or is never answered (ctx ends the wait).
		if err := session.write(pub); err != nil {
			return fmt.Errorf("publish %s: %w", m.ID, err)
		}
		acks = append(acks, ack)
	}
	for answered < len(acks) {
		if err := awaitNext(); err != nil {
			return err
		}
	}
	return nil
}

// packet is m's PUBLISH: QoS 1 to the target's topic, the message id as
// a user property, the enqueue's Content-Type.
func (s *sender) packet(m *storeforward.Message) *packets.Publish {
	props := &packets.Properties{User: []packets.User{{Key: UserPropertyMessageID, Value: m.ID}}}
	for _, h := range m.Headers {
		if strings.EqualFold(h.Key, "Content-Type") {
			props.ContentType = h.Value
		}
	}
	return &packets.Publish{QoS: 1, Topic: s.topic.of(m.ID), Payload: m.Payload, Properties: props}
}

// pubackError is what the answer to message id's publish says: nil for
// success, a Refusal for a failure reason code.
func pubackError(id string, ack packets.ControlPacket) error {
	puback, ok := ack.Content.(*packets.Puback)
	if !ok {
		// The session let the publish go unanswered (it was closed).
		return fmt.Errorf("publish %s: no PUBACK (the client's session ended)", id)
	}
	if puback.ReasonCode >= 0x80 {
		reason := ""
		if puback.Properties != nil {
			reason = puback.Properties.ReasonString
		}
		return &Refusal{Code: puback.ReasonCode, Reason: reason, ID: id}
	}
	return nil
}

// publishFailed is why a publish ended with ctx.
func publishFailed(ctx context.Context, id string) error {
	if errors.Is(context.Cause(ctx), errConnectionLost) {
		return fmt.Errorf("publish %s: %w", id, errConnectionLost)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("publish %s: no PUBACK in time", id)
	}
	return fmt.Errorf("publish %s: %w", id, context.Cause(ctx))
}

// connectionLostGrace is how long a publish still waits for its answer
// once its connection dropped.
const connectionLostGrace = 200 * time.Millisecond

// errConnectionLost fails a publish whose connection dropped before its
// PUBACK (and with it the broker's session).
var errConnectionLost = errors.New("connection lost before the PUBACK (no session to resume: session_expiry 0)")

// Close implements storeforward.Sender.
func (s *sender) Close() {
	var wg sync.WaitGroup
	for _, l := range s.links {
		wg.Go(l.close)
	}
	wg.Wait()
}

func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cm != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = l.cm.Disconnect(ctx)
		cancel()
		l.cancel()
		_ = l.session.Close()
		l.cm, l.session = nil, nil
	}
}

// Refusal is a PUBACK with a failure reason code.
type Refusal struct {
	Code   byte
	Reason string
	ID     string
}

func (r *Refusal) Error() string {
	msg := fmt.Sprintf("publish %s: broker answered reason code 0x%02x", r.ID, r.Code)
	if r.Reason != "" {
		msg += ": " + r.Reason
	}
	return msg
}

// Verdict implements storeforward.Refusal: not authorized (0x87), topic
// name invalid (0x90), packet too large (0x95) and payload format invalid
// (0x99) are this message's fault and permanent; the rest (quota
// exceeded, unspecified error, implementation specific) are retried. The
// code for park_on is the decimal reason code ("135").
func (r *Refusal) Verdict() storeforward.Verdict {
	switch r.Code {
	case 0x87, 0x90, 0x95, 0x99:
		return storeforward.Verdict{Code: strconv.Itoa(int(r.Code)), Permanent: true}
	}
	return storeforward.Verdict{Code: strconv.Itoa(int(r.Code))}
}
