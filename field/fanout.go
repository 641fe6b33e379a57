package field

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/role"
)

// ErrUnknownAttribute is what a ServeFunc returns (wrapped) for an
// attribute the address space does not have; the fan-out then forgets
// that attribute's value at the next replay.
var ErrUnknownAttribute = errors.New("unknown tag")

// ServeFunc serves one attribute's value in the OPC UA address space with
// the StatusCode given (the OPC UA server's TagUpdate).
type ServeFunc func(instance, attribute string, v any, status ua.StatusCode, ts time.Time) error

// Update is one attribute's value as history forwarding takes it.
type Update struct {
	Instance  string
	Attribute string
	Value     Value
	Quality   Quality
	Timestamp time.Time
}

// History forwards values to a historian (store-and-forward's history
// forwarder); it must not block.
type History interface {
	OfferUpdate(Update) bool
}

// Fanout hands every value from the sources (the gateway subscribe
// workers, TagUpdate; the OPC UA client sessions, TagStatus) to the parts
// that consume values: limit alarms, the OPC UA address space (set once it
// starts) and, on the Active node only, history forwarding (a hot Standby
// reads values but must not forward them a second time). History follows
// role.State.Leading, not the Active role alone: an Active whose quorum
// confirmation is late for a moment still forwards, since its enqueue
// commits only through the quorum and nothing would offer the value again.
//
// It keeps each attribute's latest value. A gateway sends a value when it
// is advised and then only when it changes, and a deploy builds the
// workers, the OPC UA server and the history forwarder side by side: a
// value that came before the server had the attribute (or before a server
// replaced by the deploy existed) would leave it BadWaitingForInitialData,
// and one that came before a new forwarder would never reach the
// historian, until the value next changes, which for a setpoint may be
// never. ReplayServer and SetHistory hand them over.
type Fanout struct {
	roles role.Source

	// mu also orders the values handed on: an update and a replay never
	// cross, so an older value cannot land after a newer.
	mu      sync.Mutex
	serve   ServeFunc
	history History
	latest  map[[2]string]latestValue // instance, attribute

	hot atomic.Bool // the site's hot_standby

	// limits evaluates limit alarms from every value, on every node.
	limits func(instance, attribute string, v any, good bool)
}

// NewFanout returns a fan-out that forwards history only while roles says
// the node leads (role.State.Leading), and hands every value to limits
// (nil: none).
func NewFanout(roles role.Source, limits func(instance, attribute string, v any, good bool)) *Fanout {
	return &Fanout{roles: roles, limits: limits}
}

// latestValue is an attribute's latest value: its StatusCode as the OPC
// UA server serves it, and its quality as the history records it.
type latestValue struct {
	v       any
	status  ua.StatusCode
	quality Quality
	ts      time.Time
}

// TagUpdate takes a gateway value: its DA quality word is served as the
// matching OPC UA StatusCode (Quality.Status).
func (f *Fanout) TagUpdate(instance, attribute string, v Value, q Quality, ts time.Time) {
	f.update(instance, attribute, latestValue{v: v, status: q.Status(), quality: q, ts: ts})
}

// TagStatus takes an upstream OPC UA server's value with its StatusCode,
// which is served whole.
func (f *Fanout) TagStatus(instance, attribute string, v Value, status ua.StatusCode, ts time.Time) {
	f.update(instance, attribute, latestValue{v: v, status: status, quality: QualityOf(status), ts: ts})
}

func (f *Fanout) update(instance, attribute string, lv latestValue) {
	f.mu.Lock()
	if f.latest == nil {
		f.latest = make(map[[2]string]latestValue)
	}
	f.latest[[2]string{instance, attribute}] = lv
	if f.limits != nil {
		f.limits(instance, attribute, lv.v, lv.status&0xC0000000 == 0)
	}
	if f.serve != nil {
		_ = f.serve(instance, attribute, lv.v, lv.status, lv.ts) // an attribute the server does not have yet: ReplayServer
	}
	if f.history != nil && f.roles.Current().Leading() {
		f.history.OfferUpdate(Update{Instance: instance, Attribute: attribute, Value: lv.v, Quality: lv.quality, Timestamp: lv.ts})
	}
	f.mu.Unlock()
}

// SetServer hands values to serve from now on (nil: to no server).
func (f *Fanout) SetServer(serve ServeFunc) {
	f.mu.Lock()
	f.serve = serve
	f.mu.Unlock()
}

// ReplayServer gives the OPC UA server every attribute's latest value;
// call it once the server's address space follows the deployed site.
// Values of attributes the site no longer has are forgotten.
func (f *Fanout) ReplayServer() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.serve == nil {
		return
	}
	for k, lv := range f.latest {
		if err := f.serve(k[0], k[1], lv.v, lv.status, lv.ts); errors.Is(err, ErrUnknownAttribute) {
			delete(f.latest, k)
		}
	}
}

// SetHistory hands values to h from now on (nil: to no history). On the
// Active node h first gets every attribute's latest value: a forwarder
// built by a deploy (the first, or one that changes the rules) would
// otherwise never forward a value that does not change, and the historian
// would have nothing of it.
func (f *Fanout) SetHistory(h History) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.history = h
	if f.roles.Current().Leading() {
		f.offerLatestLocked()
	}
}

// SetHot says whether the site runs its workers on the Standby too.
func (f *Fanout) SetHot(hot bool) { f.hot.Store(hot) }

// FollowRole gives the history forwarder every attribute's latest value
// when a hot Standby becomes Active, until ctx ends. Its workers ran all
// along and do not subscribe again, so the gateway sends nothing new of a
// value that does not change, which the node, a Standby until now, never
// forwarded: on_change rules would not record it and sample rules would
// have nothing to sample. (A node that is not hot subscribes when it
// becomes Active, and the advise brings every value.)
func (f *Fanout) FollowRole(ctx context.Context) error {
	states, stop := f.roles.Watch()
	defer stop()
	was := role.Detached
	for {
		select {
		case <-ctx.Done():
			return nil
		case st := <-states:
			f.roleChanged(was, st.Role)
			was = st.Role
		}
	}
}

// roleChanged is FollowRole's step: a hot node that becomes Active offers
// its latest values.
func (f *Fanout) roleChanged(was, now role.Role) {
	if now != role.Active || was == role.Active || !f.hot.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offerLatestLocked()
}

// offerLatestLocked hands the history forwarder, if any, every attribute's
// latest value.
func (f *Fanout) offerLatestLocked() {
	if f.history == nil {
		return
	}
	for k, lv := range f.latest {
		f.history.OfferUpdate(Update{Instance: k[0], Attribute: k[1], Value: lv.v, Quality: lv.quality, Timestamp: lv.ts})
	}
}
