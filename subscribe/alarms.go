package subscribe

import (
	"context"
	"fmt"

	"github.com/scadad/scadad/gateway"
	"github.com/scadad/scadad/role"
)

// AlarmSourceConfig is one alarm source (an object or tag the gateway
// reports alarms of) subscribed on one connection.
type AlarmSourceConfig struct {
	Connection string
	Source     string
}

func (a AlarmSourceConfig) key() string { return "\x00alarm\x00" + a.Connection + "\x00" + a.Source }

// alarmWorkerKey names an alarm worker within its connection, apart from
// the instance names of its tag workers.
func alarmWorkerKey(source string) string { return "\x00alarm\x00" + source }

// alarmWorkerLabel is the instance label of an alarm worker in logs,
// metrics and status.
func alarmWorkerLabel(source string) string { return "alarms:" + source }

// AlarmSink receives what the alarm workers learn. Calls for one
// connection are not concurrent with each other.
type AlarmSink interface {
	// AlarmSnapshot is the full current condition of a source's alarms,
	// from a subscribe: on the first subscribe and after every session
	// change, so it is the condition refresh too. An error fails the
	// attempt (the worker retries under its backoff): a refresh the sink
	// could not record must not count as a confirmed subscription.
	AlarmSnapshot(ctx context.Context, connection, source string, alarms []gateway.Alarm) error
	// AlarmChange is one transition from the active-alarm stream.
	AlarmChange(connection string, a gateway.Alarm)
}

// AlarmConn is what an alarm worker needs from a gateway connection;
// *gateway.Client implements it.
type AlarmConn interface {
	SubscribeAlarms(ctx context.Context, source string) ([]gateway.Alarm, error)
}

// alarmSubscription subscribes one alarm source. It holds no gateway
// handles: a new session forgets every subscription of the old one and
// the worker simply subscribes again.
type alarmSubscription struct {
	conn   *connection
	source string
}

// Subscribe implements Subscription. The snapshot is handed on only while
// the attempt is live: the reply of a superseded attempt is older than the
// one that superseded it.
func (s *alarmSubscription) Subscribe(ctx context.Context) error {
	ac, ok := s.conn.conn.(AlarmConn)
	if !ok {
		return fmt.Errorf("subscribe alarms of %q: connection %q: %w", s.source, s.conn.cfg.Name, gateway.ErrNoCapability)
	}
	alarms, err := ac.SubscribeAlarms(ctx, s.source)
	if err != nil {
		return fmt.Errorf("subscribe alarms of %q: %w", s.source, err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if sink := s.conn.alarms; sink != nil {
		if err := sink.AlarmSnapshot(ctx, s.conn.cfg.Name, s.source, alarms); err != nil {
			return fmt.Errorf("record the alarms of %q: %w", s.source, err)
		}
	}
	return nil
}

func (s *alarmSubscription) reset() {}

func (s *alarmSubscription) release() func() { return nil }

func (c *connection) addAlarmSource(source string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alarmSources[source]++
}

func (c *connection) removeAlarmSource(source string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.alarmSources[source]--; c.alarmSources[source] <= 0 {
		delete(c.alarmSources, source)
	}
}

// AlarmChange implements gateway.AlarmHandler: transitions of sources this
// connection has a worker for go to the sink.
func (c *connection) AlarmChange(a gateway.Alarm) {
	c.mu.Lock()
	ok := c.alarmSources[a.Source] > 0
	c.mu.Unlock()
	if !ok || c.alarms == nil {
		return
	}
	c.alarms.AlarmChange(c.cfg.Name, a)
}

// AlarmAcker acknowledges alarms on a gateway; *gateway.Client is one.
type AlarmAcker interface {
	AcknowledgeAlarm(ctx context.Context, id, operator, comment string, epoch role.Epoch) (gateway.Alarm, error)
}

// AcknowledgeAlarm forwards an acknowledgement, already allowed by the
// caller's gate, to the running gateway connection named connection.
func (m *Manager) AcknowledgeAlarm(ctx context.Context, connection, id, operator, comment string, epoch role.Epoch) error {
	m.connsMu.RLock()
	c, ok := m.conns[connection]
	m.connsMu.RUnlock()
	if !ok {
		return fmt.Errorf("acknowledge alarm %q: connection %q not running on this node", id, connection)
	}
	a, ok := c.conn.(AlarmAcker)
	if !ok {
		return fmt.Errorf("acknowledge alarm %q: connection %q: %w", id, connection, gateway.ErrNoCapability)
	}
	if _, err := a.AcknowledgeAlarm(ctx, id, operator, comment, epoch); err != nil {
		return err
	}
	return nil
}
