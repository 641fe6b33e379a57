package mqtttarget

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"
)

// publishSession is the client's MQTT session state (paho's, in memory),
// through which the sender publishes itself: paho.golang's Publish writes
// from the goroutine that calls it and waits for the PUBACK, so publishes
// kept in order go one PUBACK after another, and publishes from several
// goroutines reach the wire in any order. The sender instead adds each
// publish to the session (a packet id, a slot of the broker's receive
// maximum, kept for a resend after a reconnect, its PUBACK routed back by
// the client's reader) and writes it to the connection the session has,
// one after another from one goroutine: a batch is pipelined and reaches
// the broker in order.
type publishSession struct {
	*state.State

	// connecting keeps AddToSession out while a CONNACK is taken:
	// paho's State replaces its receive-maximum quota in ConAckReceived
	// and reads it in AddToSession outside its own lock (a data race
	// when a publish is made as the client reconnects).
	connecting sync.RWMutex

	mu sync.Mutex
	// conn is the connection once the broker's CONNACK is in and the
	// session has resent what an earlier one left unacknowledged: nil
	// between connections. maxQoS is what that CONNACK allows.
	conn   io.Writer
	maxQoS byte
}

func newPublishSession() *publishSession {
	return &publishSession{State: state.NewInMemory()}
}

// ConAckReceived takes the connection for publishing once the session
// has resent what it held, so a new publish never overtakes a resent one.
func (p *publishSession) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	p.connecting.Lock()
	err := p.State.ConAckReceived(conn, cp, ca)
	p.connecting.Unlock()
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conn, p.maxQoS = conn, 2
	if ca.Properties != nil && ca.Properties.MaximumQOS != nil {
		p.maxQoS = *ca.Properties.MaximumQOS
	}
	return nil
}

// AddToSession is State's, never while a CONNACK is taken. A publish
// waiting for a slot of the old connection's quota ends when that
// connection is lost (ConnectionLost comes before the next CONNACK).
func (p *publishSession) AddToSession(ctx context.Context, packet session.Packet, resp chan<- packets.ControlPacket) error {
	p.connecting.RLock()
	defer p.connecting.RUnlock()
	return p.State.AddToSession(ctx, packet, resp)
}

// ConnectionLost drops the connection.
func (p *publishSession) ConnectionLost(dp *packets.Disconnect) error {
	p.mu.Lock()
	p.conn = nil
	p.mu.Unlock()
	return p.State.ConnectionLost(dp)
}

// errNotConnected fails a publish made between connections.
var errNotConnected = errors.New("not connected to the broker")

// allows says whether the current connection takes publishes at qos.
func (p *publishSession) allows(qos byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.conn == nil:
		return errNotConnected
	case p.maxQoS < qos:
		return fmt.Errorf("the broker allows QoS %d at most (its CONNACK), not %d", p.maxQoS, qos)
	}
	return nil
}

// write writes a publish already added to the session.
func (p *publishSession) write(pub *packets.Publish) error {
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	if conn == nil {
		return errNotConnected
	}
	_, err := pub.WriteTo(conn)
	return err
}
