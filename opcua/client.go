package opcua

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/uasec"
)

var errNoLevel = errors.New("ServiceLevel read returned no value")

func readLevel(ctx context.Context, c *gopcua.Client) (byte, error) {
	resp, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{
		NodeID: ua.NewNumericNodeID(0, id.Server_ServiceLevel), AttributeID: ua.AttributeIDValue,
	}}})
	if err != nil {
		return 0, fmt.Errorf("read ServiceLevel: %w", err)
	}
	if len(resp.Results) != 1 || resp.Results[0].Status != ua.StatusOK || resp.Results[0].Value == nil {
		return 0, errNoLevel
	}
	b, ok := resp.Results[0].Value.Value().(byte)
	if !ok {
		return 0, fmt.Errorf("ServiceLevel is %T, not Byte", resp.Results[0].Value.Value())
	}
	return b, nil
}

// ReadServiceLevel connects to endpoint, reads Server.ServiceLevel and
// disconnects, all within the options' timeout.
func ReadServiceLevel(ctx context.Context, endpoint string, o uasec.ClientOptions) (byte, error) {
	ctx, cancel := context.WithTimeout(ctx, o.EffectiveTimeout())
	defer cancel()
	c, err := uasec.Dial(ctx, endpoint, o)
	if err != nil {
		return 0, err
	}
	defer o.Close(c)
	lvl, err := readLevel(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", endpoint, err)
	}
	return lvl, nil
}

// Pick reads every endpoint's ServiceLevel and returns the highest; a tie
// goes to the endpoint listed first. levels holds the endpoints that answered.
func Pick(ctx context.Context, urls []string) (string, map[string]byte, error) {
	return PickWith(ctx, urls, uasec.ClientOptions{})
}

// PickWith is Pick with explicit client options.
func PickWith(ctx context.Context, urls []string, o uasec.ClientOptions) (string, map[string]byte, error) {
	if len(urls) == 0 {
		return "", nil, fmt.Errorf("pick: no endpoints")
	}
	type answer struct {
		lvl byte
		err error
	}
	answers := make([]answer, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lvl, err := ReadServiceLevel(ctx, u, o)
			answers[i] = answer{lvl, err}
		}()
	}
	wg.Wait()
	levels := make(map[string]byte)
	best, bestLvl := -1, byte(0)
	var errs []error
	for i, a := range answers {
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		levels[urls[i]] = a.lvl
		if best < 0 || a.lvl > bestLvl {
			best, bestLvl = i, a.lvl
		}
	}
	if best < 0 {
		return "", levels, fmt.Errorf("pick: no endpoint answered: %w", errors.Join(errs...))
	}
	if bestLvl == LevelDown {
		return "", levels, fmt.Errorf("pick: every answering endpoint publishes ServiceLevel 0")
	}
	return urls[best], levels, nil
}

// Watch follows a node's value on whichever endpoint has the highest
// ServiceLevel, printing each notification to out. It re-picks when the
// session dies or the watched server's ServiceLevel drops, and prints the
// gap between the last new Good value before a failover and the first after
// it (a Bad value, or the old value again, is not data a client can use).
// It returns when ctx ends.
func Watch(ctx context.Context, urls []string, nodeID string, out io.Writer) error {
	return WatchWith(ctx, urls, nodeID, out, uasec.ClientOptions{})
}

// WatchWith is Watch with explicit client options.
func WatchWith(ctx context.Context, urls []string, nodeID string, out io.Writer, o uasec.ClientOptions) error {
	return WatchEvents(ctx, urls, nodeID, o, func(e WatchEvent) { io.WriteString(out, e.Text()) })
}

// The kinds of WatchEvent.
const (
	WatchStarted      = "watching"
	WatchFailover     = "failover"
	WatchLeaving      = "leaving"
	WatchPickFailed   = "pick_failed"
	WatchValue        = "value"
	WatchServiceLevel = "service_level"
	WatchGap          = "gap"
)

// WatchEvent is one thing a watch saw: a value, the watched server's
// ServiceLevel, a failover and the gap it caused. Fields a kind does not
// use are zero.
type WatchEvent struct {
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Endpoint string    `json:"endpoint,omitempty"`
	// From is the endpoint a failover left.
	From string `json:"from,omitempty"`
	Node string `json:"node,omitempty"`
	// Levels are the ServiceLevels the pick saw (watching, failover).
	Levels map[string]byte `json:"service_levels,omitempty"`
	// Level is the watched server's ServiceLevel (-1: unreadable).
	Level *int `json:"service_level,omitempty"`
	// Value, Status and Source are a value notification's.
	Value  any       `json:"value,omitempty"`
	Status string    `json:"status,omitempty"`
	Source time.Time `json:"source_time,omitzero"`
	// Gap runs from the last new Good value before a failover to the
	// first after it.
	Gap   time.Duration `json:"gap_ns,omitempty"`
	Error string        `json:"error,omitempty"`
}

// Text is the event as one line for a person.
func (e WatchEvent) Text() string {
	at := stamp(e.Time)
	switch e.Kind {
	case WatchPickFailed:
		return fmt.Sprintf("%s pick: %s\n", at, e.Error)
	case WatchFailover:
		return fmt.Sprintf("%s failover %s -> %s (levels %v)\n", at, e.From, e.Endpoint, e.Levels)
	case WatchStarted:
		return fmt.Sprintf("%s watching %s on %s (levels %v)\n", at, e.Node, e.Endpoint, e.Levels)
	case WatchLeaving:
		return fmt.Sprintf("%s leaving %s: %s\n", at, e.Endpoint, e.Error)
	case WatchServiceLevel:
		return fmt.Sprintf("%s %s ServiceLevel %d\n", at, e.Endpoint, *e.Level)
	case WatchGap:
		return fmt.Sprintf("%s notification gap %v\n", at, e.Gap)
	default:
		return fmt.Sprintf("%s %s %s = %v (%s, source %s)\n", at, e.Endpoint, e.Node, e.Value, e.Status, stamp(e.Source))
	}
}

// WatchEvents is WatchWith handing each event to emit instead of
// printing it.
func WatchEvents(ctx context.Context, urls []string, nodeID string, o uasec.ClientOptions, emit func(WatchEvent)) error {
	nid, err := ua.ParseNodeID(nodeID)
	if err != nil {
		return fmt.Errorf("watch: node id %q: %w", nodeID, err)
	}
	w := &watcher{emit: emit, opts: o, node: nid}
	for ctx.Err() == nil {
		url, levels, err := PickWith(ctx, urls, o)
		if err != nil {
			emit(WatchEvent{Time: time.Now(), Kind: WatchPickFailed, Error: err.Error()})
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		if w.url != "" {
			emit(WatchEvent{Time: time.Now(), Kind: WatchFailover, From: w.url, Endpoint: url, Levels: levels})
			w.failedOver = true
		} else {
			emit(WatchEvent{Time: time.Now(), Kind: WatchStarted, Node: nodeID, Endpoint: url, Levels: levels})
		}
		w.url = url
		reason := w.follow(ctx)
		if errors.Is(reason, errUnknownNode) {
			// The server does not have it: no other server will either,
			// and trying again at once only loads the servers.
			return reason
		}
		if ctx.Err() == nil {
			emit(WatchEvent{Time: time.Now(), Kind: WatchLeaving, Endpoint: url, Error: reason.Error()})
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return nil
}

// errUnknownNode is a watched node id the server does not know.
var errUnknownNode = errors.New("the server has no such node")

func stamp(t time.Time) string { return t.Format("15:04:05.000") }

type watcher struct {
	emit func(WatchEvent)
	opts uasec.ClientOptions
	node *ua.NodeID
	url  string
	// lastValue is when the last new Good value arrived, and lastSource
	// its source timestamp: the gap after a failover runs from it to the
	// first Good value newer than it. A Bad value, or the last value
	// again (a server that held it), gives a client nothing new.
	lastValue  time.Time
	lastSource time.Time
	failedOver bool
}

const (
	handleValue = 1
	handleLevel = 2

	// initialValuesWait bounds the wait for a new subscription's first
	// data change.
	initialValuesWait = 5 * time.Second
)

// follow subscribes on w.url and returns why it stopped.
func (w *watcher) follow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	states := make(chan gopcua.ConnState, 8)
	c, err := uasec.Dial(ctx, w.url, w.opts, gopcua.StateChangedCh(states))
	if err != nil {
		return err
	}
	defer w.opts.Close(c)
	notes := make(chan *gopcua.PublishNotificationData, 16)
	sub, err := c.Subscribe(ctx, &gopcua.SubscriptionParameters{Interval: 100 * time.Millisecond, MaxKeepAliveCount: 5, LifetimeCount: 50}, notes)
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	defer w.opts.Cancel(sub)
	res, err := sub.Monitor(ctx, ua.TimestampsToReturnBoth,
		gopcua.NewMonitoredItemCreateRequestWithDefaults(w.node, ua.AttributeIDValue, handleValue),
		gopcua.NewMonitoredItemCreateRequestWithDefaults(ua.NewNumericNodeID(0, id.Server_ServiceLevel), ua.AttributeIDValue, handleLevel))
	if err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	for _, r := range res.Results {
		switch r.StatusCode {
		case ua.StatusOK:
		case ua.StatusBadNodeIDUnknown, ua.StatusBadNodeIDInvalid:
			return fmt.Errorf("watch %s on %s: %w (%s); node ids look like \"ns=2;s=Pump1.Speed\"", w.node, w.url, errUnknownNode, statusName(r.StatusCode))
		default:
			return fmt.Errorf("monitor %s: %w", w.node, r.StatusCode)
		}
	}
	// gopcua does not pass keep-alives on, so a quiet value says nothing
	// about the session: read the ServiceLevel every second instead.
	dead := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			rctx, rcancel := context.WithTimeout(ctx, w.opts.EffectiveTimeout())
			_, err := readLevel(rctx, c)
			rcancel()
			if err != nil && ctx.Err() == nil {
				dead <- fmt.Errorf("server not answering: %w", err)
				return
			}
		}
	}()
	// The initial values follow Monitor within a publishing interval. None
	// at all means nothing is being published to us: gopcua's
	// client can leave its publish loop paused for good when Subscribe
	// races the loop's start (see subscribe in server_test.go), and a quiet
	// subscription then looks like a quiet value. Leave and subscribe anew.
	initial := time.NewTimer(initialValuesWait)
	defer initial.Stop()
	waitInitial := initial.C
	level := -1
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-waitInitial:
			return fmt.Errorf("no initial values within %v", initialValuesWait)
		case st := <-states:
			if st == gopcua.Closed || st == gopcua.Disconnected {
				return fmt.Errorf("session %v", st)
			}
		case err := <-dead:
			return err
		case n := <-notes:
			if n.Error != nil {
				return fmt.Errorf("subscription: %w", n.Error)
			}
			dcn, ok := n.Value.(*ua.DataChangeNotification)
			if !ok {
				continue
			}
			waitInitial = nil
			for _, item := range dcn.MonitoredItems {
				if item == nil || item.Value == nil {
					continue
				}
				switch item.ClientHandle {
				case handleLevel:
					lvl := -1
					if item.Value.Value != nil {
						if b, ok := item.Value.Value.Value().(byte); ok {
							lvl = int(b)
						}
					}
					w.emit(WatchEvent{Time: time.Now(), Kind: WatchServiceLevel, Endpoint: w.url, Level: &lvl})
					if level >= 0 && lvl < level {
						return fmt.Errorf("ServiceLevel dropped %d -> %d", level, lvl)
					}
					level = lvl
				case handleValue:
					now := time.Now()
					if item.Value.Status == ua.StatusOK && item.Value.SourceTimestamp.After(w.lastSource) {
						if w.failedOver && !w.lastValue.IsZero() {
							w.emit(WatchEvent{Time: now, Kind: WatchGap, Gap: now.Sub(w.lastValue).Round(time.Millisecond)})
							w.failedOver = false
						}
						w.lastValue, w.lastSource = now, item.Value.SourceTimestamp
					}
					var v any
					if item.Value.Value != nil {
						v = item.Value.Value.Value()
					}
					w.emit(WatchEvent{Time: now, Kind: WatchValue, Endpoint: w.url, Node: w.node.String(), Value: v,
						Status: statusName(item.Value.Status), Source: item.Value.SourceTimestamp})
				}
			}
		}
	}
}

// statusName is an OPC UA status code as an operator reads it: "Good", or
// the code's name without its "Status" prefix and its number
// ("BadWaitingForInitialData 0x80320000").
func statusName(c ua.StatusCode) string {
	if c == ua.StatusOK {
		return "Good"
	}
	if d, ok := ua.StatusCodes[c]; ok {
		return fmt.Sprintf("%s 0x%08X", strings.TrimPrefix(d.Name, "Status"), uint32(c))
	}
	return fmt.Sprintf("0x%08X", uint32(c))
}
