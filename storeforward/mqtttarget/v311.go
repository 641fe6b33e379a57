package mqtttarget

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/scadad/scadad/storeforward"
)

// Protocol311 is Settings.Protocol for an MQTT 3.1.1 broker.
const Protocol311 = "3.1.1"

// sender311 publishes with MQTT 3.1.1 (eclipse/paho.mqtt.golang: the
// MQTT 5 client, paho.golang, speaks no 3.1.1). 3.1.1 has no properties:
// the message id travels only where the topic template puts it ({id}),
// and a PUBACK has no reason code, so no publish is ever refused: a
// broker that does not authorize one acknowledges it or closes the
// connection (retried).
type sender311 struct {
	target, node string
	set          Settings
	topic        topicTemplate
	url          *url.URL
	tls          *tls.Config
	timeout      time.Duration

	mu     sync.Mutex
	client mqtt.Client
}

func (s *sender311) conn(ctx context.Context) (mqtt.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client, nil
	}
	scheme := "tcp"
	if s.tls != nil {
		scheme = "ssl"
	}
	if _, _, err := s.set.Password(); err != nil {
		return nil, err
	}
	opts := mqtt.NewClientOptions().
		AddBroker(scheme + "://" + s.url.Host).
		SetClientID(ClientID(s.node, s.target)).
		SetProtocolVersion(4).
		// A persistent session (the broker keeps in-flight messages across
		// a reconnect) where session_expiry asks for one: 3.1.1 sessions
		// have no expiry.
		SetCleanSession(s.set.SessionExpiry == 0).
		SetOrderMatters(true).
		// Publishes a reconnect interrupted are resent in the order they
		// were made (the default store resends in map order).
		SetStore(mqtt.NewOrderedMemoryStore()).
		SetKeepAlive(20 * time.Second).
		SetConnectTimeout(min(max(s.timeout, time.Second), 10*time.Second)).
		SetAutoReconnect(true).
		SetMaxReconnectInterval(time.Second).
		SetCredentialsProvider(func() (string, string) {
			pw, _, err := s.set.Password()
			if err != nil {
				// Refused by the broker; conn reports the file at the
				// next client.
				return s.set.Username, ""
			}
			return s.set.Username, string(pw)
		})
	opts.SetCustomOpenConnectionFn(func(_ *url.URL, o mqtt.ClientOptions) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), o.ConnectTimeout)
		defer cancel()
		return dialBroker(ctx, s.url.Host, s.tls)
	})
	c := mqtt.NewClient(opts)
	if err := wait(ctx, c.Connect()); err != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("connect to %s: %w", s.url.Redacted(), err)
	}
	s.client = c
	return c, nil
}

// wait waits for t or ctx.
func wait(ctx context.Context, t mqtt.Token) error {
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Send implements storeforward.Sender: the batch's messages are published
// at QoS 1 in order, up to InFlight awaiting their PUBACK at once (the
// client writes publishes in the order they are made, and resends those a
// reconnect interrupted in that order too: an ordered store). A publish
// the client fails at once (not connected) ends the batch before a later
// one is made.
func (s *sender311) Send(ctx context.Context, batch []*storeforward.Message) error {
	c, err := s.conn(ctx)
	if err != nil {
		return err
	}
	window := len(batch)
	if s.set.InFlight > 0 {
		window = min(window, s.set.InFlight)
	}
	tokens := make([]mqtt.Token, 0, len(batch))
	acked := 0
	awaitNext := func() error {
		m := batch[acked]
		if err := wait(ctx, tokens[acked]); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("publish %s: no PUBACK in time", m.ID)
			}
			return fmt.Errorf("publish %s: %w", m.ID, err)
		}
		acked++
		return nil
	}
	for i, m := range batch {
		for i-acked >= window {
			if err := awaitNext(); err != nil {
				return err
			}
		}
		t := c.Publish(s.topic.of(m.ID), 1, false, m.Payload)
		select {
		case <-t.Done():
			if err := t.Error(); err != nil {
				return fmt.Errorf("publish %s: %w", m.ID, err)
			}
		default:
		}
		tokens = append(tokens, t)
	}
	for acked < len(tokens) {
		if err := awaitNext(); err != nil {
			return err
		}
	}
	return nil
}

// Close implements storeforward.Sender.
func (s *sender311) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		s.client.Disconnect(250)
		s.client = nil
	}
}
