package opcua

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
	"github.com/rs/zerolog"
)

// subscriptions is scadad's own implementation of the OPC UA Subscription
// and MonitoredItem service sets (Part 4, 5.12 and 5.13). gopcua's
// implementation can wedge the whole server for good (a lock-order
// inversion between a subscription deleting itself and
// CreateMonitoredItems, and a blocking channel send under its item lock),
// reuses live subscription ids and never cleans up after a session; see
// WORKAROUNDS.md. None of its subscription code runs: every handler of the
// two service sets is ours.
//
// What it does, and what it leaves out:
//   - data changes of the Value attribute (ServiceLevel and the other
//     namespace-0 variables, and the site's tags), with DataChangeFilter
//     triggers and absolute or percent (EURange) deadbands, and events of
//     alarm conditions (events.go); no triggering, no TransferSubscriptions;
//   - values arrive as "this node changed" (changed, fed by the notifier) and
//     are read when they arrive; each monitored item keeps the latest value
//     not yet sent, so the revised queue size is always 1 and a value
//     replaced before a Publish response carried it is counted
//     (scadad_opcua_notifications_coalesced_total);
//   - a retransmission queue per subscription (Part 4, 5.13.1.1): a sent
//     NotificationMessage is kept until a later Publish request
//     acknowledges it, listed in AvailableSequenceNumbers and given back
//     by Republish; bounded in messages per subscription and in bytes per
//     session and in all (retainLocked), the oldest dropped and counted
//     (scadad_opcua_retransmission_dropped_total).
//
// Locking: mu guards all the state below it. It is never held across a
// network send or a channel send that can block: Publish responses are
// queued per session and written by a sender goroutine outside the lock.
// While holding mu the engine reads node values (read, exists), which take
// the site namespace's lock, or the library's namespace-0 lock and then
// Server.mu (the ServiceLevel's value); no code holding any of those ever
// takes mu.
type subscriptions struct {
	clock   Clock
	log     zerolog.Logger
	metrics *metrics
	limits  subLimits
	// read returns a node's current Value attribute (never nil).
	read func(nid *ua.NodeID) *ua.DataValue
	// exists reports whether a monitored item may watch nid.
	exists func(nid *ua.NodeID) bool
	// euRange, when set, gives a node's EURange, for percent deadbands.
	euRange func(nid *ua.NodeID) (low, high float64, ok bool)
	// notifierOf says whether nid is an event notifier and whose events
	// it reports (events.go); by default no node is.
	notifierOf func(nid *ua.NodeID) (source string, all, ok bool)
	// send writes one response on a secure channel.
	send func(sc *uasc.SecureChannel, reqID uint32, resp ua.Response) error
	// wake tells run that a subscription was added or retimed.
	wake    chan struct{}
	senders sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	lastSub  uint32 // ids only grow (past 2^32 they wrap, skipping ids in use)
	lastItem uint32
	subs     map[uint32]*subscription
	items    map[uint32]*monitoredItem
	byNode   map[string]map[uint32]*monitoredItem // node id string -> items watching it
	sessions map[string]*subSession               // tokenKey -> session state
	// eventItems are the items on EventNotifier attributes (events.go).
	eventItems map[uint32]*monitoredItem
	// retainedBytes is what all retransmission queues keep (estimated).
	retainedBytes int
}

// subLimits are the engine's bounds; New fills them from Config.
type subLimits struct {
	minInterval, maxInterval time.Duration
	maxPerRequest            int // MaxNodesPerRequest
	// retainPerSub bounds a subscription's retransmission queue in
	// messages; retainSessionBytes and retainTotalBytes bound, by the
	// estimated encoded size, what a session's subscriptions and all of
	// them keep. Past a bound the oldest message goes, counted.
	retainPerSub                         int
	retainSessionBytes, retainTotalBytes int
}

const (
	// maxKeepAliveCount caps a subscription's keep-alive count.
	maxKeepAliveCount = 1000
	// maxLifetime caps how long a subscription outlives its last Publish
	// request (beyond three keep-alive periods, which the spec requires):
	// a client that vanished leaves nothing behind for longer.
	maxLifetime = time.Hour
	// maxPublishRequests bounds the Publish requests queued (or being
	// answered) per session; one more is answered BadTooManyPublishRequests.
	maxPublishRequests = 20
	// maxSubscriptionsPerSession, maxSubscriptions and
	// maxItemsPerSubscription bound what clients can make the server hold.
	maxSubscriptionsPerSession = 100
	maxSubscriptions           = 4000
	maxItemsPerSubscription    = 10000
	// maxNotificationsPerMessage and maxMessageBytes bound one Publish
	// response; the rest follows with MoreNotifications. gopcua v0.8.0's
	// server sent a response as one chunk, and clients (gopcua's among
	// them) refuse chunks over their 64 KiB receive buffer; v0.9.0 splits
	// them, and small messages still suit every client.
	maxNotificationsPerMessage = 1000
	maxMessageBytes            = 48 << 10
	// publishSendTimeout bounds a Publish response's send. gopcua v0.8.0
	// checks the context only before writing; a write to a peer that stops
	// reading is bounded by TCP, and it never holds mu.
	publishSendTimeout = 5 * time.Second
	// closeWait bounds how long close waits for senders still writing.
	closeWait = 2 * time.Second
	// maxRetainedPerSubscription is the retransmission queue of a
	// subscription: twice the Publish requests a session may have
	// outstanding (Part 4, 5.13.1.1 asks for at least that multiple),
	// so a client pipelining the most it may still gets back every
	// message it has not acknowledged.
	maxRetainedPerSubscription = 2 * maxPublishRequests
	// maxRetainedSessionBytes and maxRetainedBytes bound the messages kept
	// for Republish per session and in all: a session of many
	// subscriptions that never acknowledges cannot hold more.
	maxRetainedSessionBytes = 4 << 20
	maxRetainedBytes        = 64 << 20
)

// subSession is what the engine keeps per OPC UA session.
type subSession struct {
	key  string
	subs map[uint32]*subscription
	// queue holds Publish requests waiting for something to answer.
	queue []pendingPublish
	// outbox holds answers for the sender goroutine, in order; sending
	// says one runs.
	outbox  []outgoing
	sending bool
	// notes are StatusChangeNotifications (BadTimeout) of subscriptions
	// whose lifetime expired, for the session's next Publish requests.
	notes []statusNote
	// retainedBytes is what its subscriptions' retransmission queues
	// keep (estimated).
	retainedBytes int
}

// retainedMessage is a sent NotificationMessage kept for Republish until
// acknowledged, with its estimated encoded size.
type retainedMessage struct {
	msg  *ua.NotificationMessage
	size int
}

type pendingPublish struct {
	sc       *uasc.SecureChannel
	reqID    uint32
	header   *ua.RequestHeader
	acks     []ua.StatusCode
	deadline time.Time // from the request's TimeoutHint; zero: none
}

type outgoing struct {
	sc    *uasc.SecureChannel
	reqID uint32
	resp  ua.Response
}

type statusNote struct {
	sub      uint32
	seq      uint32
	forgetAt time.Time
}

type subscription struct {
	id            uint32
	sess          *subSession
	interval      time.Duration
	keepAlive     uint32 // max keep-alive count
	lifetime      uint32 // lifetime count
	maxNotes      uint32 // MaxNotificationsPerPublish, 0: our cap
	publishing    bool
	items         map[uint32]*monitoredItem
	ready         []*monitoredItem // reporting items with a value to send, oldest first
	seq           uint32           // last sequence number used
	nextTick      time.Time        // end of the current publishing interval
	keepAliveTick uint32           // intervals since the last message
	lifetimeTick  uint32           // intervals without a queued Publish request
	late          bool             // wants to send and waits for a Publish request
	lateSince     time.Time
	// retained is the retransmission queue: messages sent and not yet
	// acknowledged, oldest first.
	retained []retainedMessage
}

type monitoredItem struct {
	id         uint32
	sub        *subscription
	node       *ua.NodeID
	key        string
	handle     uint32
	mode       ua.MonitoringMode
	filter     changeFilter
	timestamps ua.TimestampsToReturn
	last       *ua.DataValue // last value sampled, for the trigger
	pending    *ua.DataValue // latest value not yet sent
	queued     bool          // in sub.ready
	ev         *eventItem    // an event item's filter and queue; nil: a data item
}

func newSubscriptions(clock Clock, log zerolog.Logger, m *metrics, limits subLimits,
	read func(*ua.NodeID) *ua.DataValue, exists func(*ua.NodeID) bool,
	send func(*uasc.SecureChannel, uint32, ua.Response) error) *subscriptions {
	return &subscriptions{
		clock: clock, log: log, metrics: m, limits: limits,
		read: read, exists: exists, send: send,
		wake:       make(chan struct{}, 1),
		subs:       make(map[uint32]*subscription),
		items:      make(map[uint32]*monitoredItem),
		byNode:     make(map[string]map[uint32]*monitoredItem),
		sessions:   make(map[string]*subSession),
		eventItems: make(map[uint32]*monitoredItem),
		notifierOf: func(*ua.NodeID) (string, bool, bool) { return "", false, false },
	}
}

// sendOn is the production send: a response on the channel the Publish
// request came on, with a bounded context (see publishSendTimeout). A
// panic in the library's send is an error here, not a dead process.
func sendOn(sc *uasc.SecureChannel, reqID uint32, resp ua.Response) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("send publish response: panic: %v", p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), publishSendTimeout)
	defer cancel()
	if err := sc.SendResponseWithContext(ctx, reqID, resp); err != nil {
		return fmt.Errorf("send publish response: %w", err)
	}
	return nil
}

// --- timing ---

// run ends publishing intervals on time until ctx ends.
func (m *subscriptions) run(ctx context.Context) {
	for {
		m.mu.Lock()
		next, ok := m.nextDueLocked()
		m.mu.Unlock()
		var due <-chan time.Time
		if ok {
			due = m.clock.After(next.Sub(m.clock.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-due:
		}
		m.tick(m.clock.Now())
	}
}

func (m *subscriptions) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// nextDueLocked is the earliest time tick has something to do.
func (m *subscriptions) nextDueLocked() (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, sub := range m.subs {
		consider(sub.nextTick)
	}
	for _, sess := range m.sessions {
		for _, p := range sess.queue {
			consider(p.deadline)
		}
		for _, n := range sess.notes {
			consider(n.forgetAt)
		}
	}
	return next, !next.IsZero()
}

// tick ends every publishing interval due at now, then answers Publish
// requests whose timeout passed (an interval due at the same moment uses
// them first) and forgets status notes nobody came for.
func (m *subscriptions) tick(now time.Time) {
	defer func() {
		// Nothing here should panic; if it does, the publishing
		// goroutine (and the process) survives it.
		if p := recover(); p != nil {
			m.metrics.panics.WithLabelValues("subscription-tick").Inc()
			m.log.Error().Interface("panic", p).Msg("opcua subscription tick panicked")
		}
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	var due []*subscription
	for _, sub := range m.subs {
		if !sub.nextTick.After(now) {
			due = append(due, sub)
		}
	}
	slices.SortFunc(due, func(a, b *subscription) int { return cmp.Compare(a.id, b.id) })
	for _, sub := range due {
		sub.nextTick = sub.nextTick.Add(sub.interval)
		if !sub.nextTick.After(now) {
			// The server fell behind (a stall, a clock jump): start a
			// fresh interval rather than count the missed ones against
			// the client's lifetime.
			sub.nextTick = now.Add(sub.interval)
		}
		m.intervalLocked(sub, now)
	}
	for _, sess := range m.sessions {
		kept := sess.queue[:0]
		for _, p := range sess.queue {
			if !p.deadline.IsZero() && !p.deadline.After(now) {
				m.answerLocked(sess, p, serviceFault(p.header, ua.StatusBadTimeout, now))
				continue
			}
			kept = append(kept, p)
		}
		clear(sess.queue[len(kept):])
		sess.queue = kept
		sess.notes = slices.DeleteFunc(sess.notes, func(n statusNote) bool { return !n.forgetAt.After(now) })
		m.settleLocked(sess)
	}
}

// intervalLocked ends one publishing interval of sub (Part 4, 5.13.1.1,
// simplified): the lifetime counts intervals without a queued Publish
// request, the keep-alive intervals without a message; data, a due
// keep-alive, or a late message take the oldest queued Publish request,
// and without one the subscription is late until one comes.
func (m *subscriptions) intervalLocked(sub *subscription, now time.Time) {
	sess := sub.sess
	if len(sess.queue) == 0 {
		sub.lifetimeTick++
		if sub.lifetimeTick >= sub.lifetime {
			m.expireLocked(sub, now)
			return
		}
	}
	if !sub.late && !(sub.publishing && len(sub.ready) > 0) {
		sub.keepAliveTick++
		if sub.keepAliveTick < sub.keepAlive {
			return
		}
	}
	if len(sess.queue) > 0 {
		p := sess.queue[0]
		sess.queue[0] = pendingPublish{}
		sess.queue = sess.queue[1:]
		m.answerLocked(sess, p, m.messageLocked(sub, p, now))
		return
	}
	if !sub.late {
		sub.late, sub.lateSince = true, now
	}
}

// expireLocked deletes a subscription whose client stopped sending Publish
// requests, and keeps a StatusChangeNotification (BadTimeout) for the
// session's next Publish request in case the client comes back.
func (m *subscriptions) expireLocked(sub *subscription, now time.Time) {
	sess := sub.sess
	m.metrics.subsExpired.Inc()
	m.log.Info().Uint32("subscription", sub.id).Int("items", len(sub.items)).
		Dur("lifetime", time.Duration(sub.lifetime)*sub.interval).
		Msg("opcua subscription expired: no Publish request for its lifetime")
	m.deleteSubLocked(sub)
	sess.notes = append(sess.notes, statusNote{sub: sub.id, seq: nextSeq(sub.seq), forgetAt: now.Add(time.Duration(sub.lifetime) * sub.interval)})
	if len(sess.notes) > maxSubscriptionsPerSession {
		sess.notes = slices.Delete(sess.notes, 0, len(sess.notes)-maxSubscriptionsPerSession)
	}
}

func nextSeq(seq uint32) uint32 {
	if seq == ^uint32(0) {
		return 1 // sequence numbers wrap past 0 (Part 4, 7.38)
	}
	return seq + 1
}

// messageLocked builds the answer of sub to Publish request p: the
// notifications ready (up to the limits; MoreNotifications says more
// follow), or a keep-alive carrying the next sequence number.
func (m *subscriptions) messageLocked(sub *subscription, p pendingPublish, now time.Time) *ua.PublishResponse {
	resp := &ua.PublishResponse{
		ResponseHeader:  responseHeader(p.header, now),
		SubscriptionID:  sub.id,
		Results:         p.acks,
		DiagnosticInfos: []*ua.DiagnosticInfo{},
	}
	sub.keepAliveTick = 0
	sub.late = false
	if !sub.publishing || len(sub.ready) == 0 {
		resp.NotificationMessage = &ua.NotificationMessage{SequenceNumber: nextSeq(sub.seq), PublishTime: now, NotificationData: []*ua.ExtensionObject{}}
		resp.AvailableSequenceNumbers = sub.available()
		return resp
	}
	limit := maxNotificationsPerMessage
	if sub.maxNotes > 0 && int(sub.maxNotes) < limit {
		limit = int(sub.maxNotes)
	}
	var notes []*ua.MonitoredItemNotification
	var events []*ua.EventFieldList
	size, n := 0, 0
	for n < len(sub.ready) && len(notes)+len(events) < limit {
		it := sub.ready[n]
		if it.ev != nil {
			if !m.takeEventsLocked(it, limit-len(notes), &size, &events) {
				break // more of its events follow
			}
			it.queued = false
			n++
			continue
		}
		dv := stamped(it.pending, it.timestamps)
		if sz := approxSize(dv); size > 0 && size+sz > maxMessageBytes {
			break
		} else {
			size += sz
		}
		notes = append(notes, &ua.MonitoredItemNotification{ClientHandle: it.handle, Value: dv})
		it.pending, it.queued = nil, false
		n++
	}
	clear(sub.ready[:n])
	sub.ready = sub.ready[n:]
	if len(notes) == 0 && len(events) == 0 {
		// Only items whose queues emptied meanwhile: a keep-alive.
		resp.NotificationMessage = &ua.NotificationMessage{SequenceNumber: nextSeq(sub.seq), PublishTime: now, NotificationData: []*ua.ExtensionObject{}}
		resp.AvailableSequenceNumbers = sub.available()
		return resp
	}
	sub.seq = nextSeq(sub.seq)
	resp.MoreNotifications = len(sub.ready) > 0
	if resp.MoreNotifications {
		sub.late, sub.lateSince = true, now
	}
	var data []*ua.ExtensionObject
	if len(notes) > 0 {
		data = append(data, ua.NewExtensionObject(&ua.DataChangeNotification{
			MonitoredItems: notes, DiagnosticInfos: []*ua.DiagnosticInfo{},
		}))
	}
	if len(events) > 0 {
		data = append(data, ua.NewExtensionObject(&ua.EventNotificationList{Events: events}))
	}
	resp.NotificationMessage = &ua.NotificationMessage{SequenceNumber: sub.seq, PublishTime: now, NotificationData: data}
	m.retainLocked(sub, resp.NotificationMessage, size)
	resp.AvailableSequenceNumbers = sub.available()
	return resp
}

// --- retransmission queue ---

// retainLocked keeps a message about to be sent for Republish until the
// client acknowledges it. Past the subscription's bound its oldest
// message goes; past the session's or the engine's byte bound, the
// session's oldest (the one just added stays, so all of them together
// exceed the engine's bound by at most one message per subscription).
// Every message dropped unacknowledged is counted.
func (m *subscriptions) retainLocked(sub *subscription, msg *ua.NotificationMessage, size int) {
	sub.retained = append(sub.retained, retainedMessage{msg: msg, size: size})
	sess := sub.sess
	sess.retainedBytes += size
	m.retainedBytes += size
	for len(sub.retained) > m.limits.retainPerSub {
		m.forgetLocked(sub, 0)
		m.metrics.unacksDropped.Inc()
	}
	for sess.retainedBytes > m.limits.retainSessionBytes || m.retainedBytes > m.limits.retainTotalBytes {
		var oldest *subscription
		for _, s := range sess.subs {
			if len(s.retained) == 0 || (s == sub && len(s.retained) == 1) {
				continue
			}
			if oldest == nil || olderMessage(s, oldest) {
				oldest = s
			}
		}
		if oldest == nil {
			return
		}
		m.forgetLocked(oldest, 0)
		m.metrics.unacksDropped.Inc()
	}
}

// olderMessage reports whether a's oldest kept message was sent before
// b's (ties by subscription id, so the choice is the same every time).
func olderMessage(a, b *subscription) bool {
	ta, tb := a.retained[0].msg.PublishTime, b.retained[0].msg.PublishTime
	return ta.Before(tb) || (ta.Equal(tb) && a.id < b.id)
}

// forgetLocked drops message i of sub's retransmission queue.
func (m *subscriptions) forgetLocked(sub *subscription, i int) {
	size := sub.retained[i].size
	sub.sess.retainedBytes -= size
	m.retainedBytes -= size
	sub.retained = slices.Delete(sub.retained, i, i+1)
	if len(sub.retained) == 0 {
		sub.retained = nil
	}
}

// acknowledgeLocked drops message seq of sub (Part 4, 5.13.5): Good, or
// BadSequenceNumberUnknown when it is not kept (never sent, acknowledged
// already, or dropped from a full queue).
func (m *subscriptions) acknowledgeLocked(sub *subscription, seq uint32) ua.StatusCode {
	i := sub.retainedIndex(seq)
	if i < 0 {
		return ua.StatusBadSequenceNumberUnknown
	}
	m.forgetLocked(sub, i)
	return ua.StatusOK
}

func (sub *subscription) retainedIndex(seq uint32) int {
	return slices.IndexFunc(sub.retained, func(r retainedMessage) bool { return r.msg.SequenceNumber == seq })
}

// available is the sequence numbers a Publish response lists as
// available for Republish (never nil: the field is an array).
func (sub *subscription) available() []uint32 {
	out := make([]uint32, len(sub.retained))
	for i, r := range sub.retained {
		out[i] = r.msg.SequenceNumber
	}
	return out
}

// approxSize estimates a notification's encoded size: the fixed part
// (handle, mask, status, timestamps, variant header) plus what a string,
// byte string or array adds.
func approxSize(dv *ua.DataValue) int {
	const fixed = 64
	if dv == nil || dv.Value == nil {
		return fixed
	}
	switch v := dv.Value.Value().(type) {
	case string:
		return fixed + len(v)
	case []byte:
		return fixed + len(v)
	}
	if reflect.ValueOf(dv.Value.Value()).Kind() == reflect.Slice {
		if b, err := ua.Encode(dv.Value); err == nil {
			return fixed + len(b)
		}
	}
	return fixed
}

// stamped is dv with only the timestamps the client asked for.
func stamped(dv *ua.DataValue, ts ua.TimestampsToReturn) *ua.DataValue {
	out := *dv
	if ts == ua.TimestampsToReturnServer || ts == ua.TimestampsToReturnNeither {
		out.SourceTimestamp, out.SourcePicoseconds = time.Time{}, 0
		out.EncodingMask &^= ua.DataValueSourceTimestamp | ua.DataValueSourcePicoseconds
	}
	if ts == ua.TimestampsToReturnSource || ts == ua.TimestampsToReturnNeither {
		out.ServerTimestamp, out.ServerPicoseconds = time.Time{}, 0
		out.EncodingMask &^= ua.DataValueServerTimestamp | ua.DataValueServerPicoseconds
	}
	return &out
}

func serviceFault(h *ua.RequestHeader, code ua.StatusCode, now time.Time) *ua.ServiceFault {
	hdr := responseHeader(h, now)
	hdr.ServiceResult = code
	return &ua.ServiceFault{ResponseHeader: hdr}
}

// --- sending ---

// answerLocked hands an answer to p to the session's sender goroutine,
// starting one if none runs. After close nothing is sent.
func (m *subscriptions) answerLocked(sess *subSession, p pendingPublish, resp ua.Response) {
	if m.closed {
		return
	}
	sess.outbox = append(sess.outbox, outgoing{sc: p.sc, reqID: p.reqID, resp: resp})
	if sess.sending {
		return
	}
	sess.sending = true
	m.senders.Add(1)
	go m.drain(sess)
}

// drain sends the session's answers in order, each outside the lock.
func (m *subscriptions) drain(sess *subSession) {
	defer m.senders.Done()
	for {
		out, ok := m.nextOutgoing(sess)
		if !ok {
			return
		}
		if err := m.send(out.sc, out.reqID, out.resp); err != nil {
			m.metrics.publishFailed.Inc()
			m.log.Debug().Err(err).Str("session", sess.key).Msg("opcua publish response not sent; the client's channel is gone")
			m.channelFailed(sess, out.sc)
		}
	}
}

// nextOutgoing takes the session's next answer, or ends its sender.
func (m *subscriptions) nextOutgoing(sess *subSession) (outgoing, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(sess.outbox) == 0 || m.closed {
		sess.outbox = nil
		sess.sending = false
		m.settleLocked(sess)
		return outgoing{}, false
	}
	out := sess.outbox[0]
	sess.outbox[0] = outgoing{}
	sess.outbox = sess.outbox[1:]
	return out, true
}

// channelFailed drops the session's queued Publish requests that came on
// sc: their answers could not be sent either. Without queued requests the
// session's subscriptions count down their lifetime.
func (m *subscriptions) channelFailed(sess *subSession, sc *uasc.SecureChannel) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess.queue = slices.DeleteFunc(sess.queue, func(p pendingPublish) bool { return p.sc == sc })
}

// settleLocked answers a session's queued Publish requests with
// BadNoSubscription once it has neither subscriptions nor status notes
// left (Part 4, 5.13.5), and forgets a session with nothing left at all.
func (m *subscriptions) settleLocked(sess *subSession) {
	if len(sess.subs) == 0 && len(sess.notes) == 0 && len(sess.queue) > 0 {
		now := m.clock.Now()
		queue := sess.queue
		sess.queue = nil
		for _, p := range queue {
			m.answerLocked(sess, p, serviceFault(p.header, ua.StatusBadNoSubscription, now))
		}
	}
	if len(sess.subs) == 0 && len(sess.notes) == 0 && len(sess.queue) == 0 && len(sess.outbox) == 0 && !sess.sending {
		if m.sessions[sess.key] == sess {
			delete(m.sessions, sess.key)
		}
	}
}

// --- value changes ---

// changed samples nid for every monitored item watching it. It never
// blocks beyond mu, so the feed behind it cannot be held up by a client.
func (m *subscriptions) changed(nid *ua.NodeID) {
	if nid == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	items := m.byNode[nid.String()]
	if len(items) == 0 {
		return
	}
	dv := m.read(nid)
	for _, it := range items {
		m.sampleLocked(it, dv, false)
	}
}

// sampleLocked offers dv to an item: a value that passes the item's
// trigger (or any value when force) replaces the one not yet sent.
func (m *subscriptions) sampleLocked(it *monitoredItem, dv *ua.DataValue, force bool) {
	if it.mode == ua.MonitoringModeDisabled || dv == nil {
		return
	}
	if !force && !triggers(it.filter.current(m.rangeOf(it.node)), it.last, dv) {
		return
	}
	it.last = dv
	if it.pending != nil {
		m.metrics.coalesced.Inc()
	}
	it.pending = dv
	if it.mode == ua.MonitoringModeReporting {
		m.queueLocked(it)
	}
}

func (m *subscriptions) queueLocked(it *monitoredItem) {
	if !it.queued && (it.pending != nil || (it.ev != nil && len(it.ev.queue) > 0)) {
		it.queued = true
		it.sub.ready = append(it.sub.ready, it)
	}
}

// unqueueLocked takes an item off its subscription's ready list; the
// caller compacts the list (once per request) before releasing mu.
func (m *subscriptions) unqueueLocked(it *monitoredItem) {
	it.queued = false
}

func (m *subscriptions) compactLocked(sub *subscription) {
	sub.ready = slices.DeleteFunc(sub.ready, func(x *monitoredItem) bool { return !x.queued })
}

// triggers reports whether next is a data change after last under the
// DataChangeFilter trigger (Part 4, 7.22.2); the default is StatusValue.
func triggers(f changeFilter, last, next *ua.DataValue) bool {
	if last == nil || last.Status != next.Status {
		return true
	}
	if f.trigger == ua.DataChangeTriggerStatus {
		return false
	}
	if !sameValue(last.Value, next.Value) && !withinDeadband(f.deadband, last.Value, next.Value) {
		return true
	}
	return f.trigger == ua.DataChangeTriggerStatusValueTimestamp && !last.SourceTimestamp.Equal(next.SourceTimestamp)
}

// withinDeadband says whether two numeric values differ by no more than an
// absolute deadband (Part 4, 7.22.2: reported when |last - next| >
// deadband). Non-numeric values have no deadband.
func withinDeadband(deadband float64, a, b *ua.Variant) bool {
	if deadband <= 0 || a == nil || b == nil {
		return false
	}
	x, okA := numericValue(a.Value())
	y, okB := numericValue(b.Value())
	return okA && okB && math.Abs(x-y) <= deadband
}

func numericValue(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, !math.IsNaN(n)
	case float32:
		return float64(n), !math.IsNaN(float64(n))
	case int8:
		return float64(n), true
	case int16:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint8:
		return float64(n), true
	case uint16:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	}
	return 0, false
}

func sameValue(a, b *ua.Variant) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(a.Value(), b.Value())
}

// --- bookkeeping ---

func (m *subscriptions) sessionLocked(key string) *subSession {
	sess, ok := m.sessions[key]
	if !ok {
		sess = &subSession{key: key, subs: make(map[uint32]*subscription)}
		m.sessions[key] = sess
	}
	return sess
}

// waiting reports whether the session key has Publish requests queued,
// waiting for something to answer.
func (m *subscriptions) waiting(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess, ok := m.sessions[key]
	return ok && len(sess.queue) > 0
}

func (m *subscriptions) owns(key string, id uint32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.ownedLocked(key, id)
	return ok
}

// ownedLocked returns the subscription id names if the session key owns it.
func (m *subscriptions) ownedLocked(key string, id uint32) (*subscription, bool) {
	sub, ok := m.subs[id]
	if !ok || sub.sess.key != key {
		return nil, false
	}
	return sub, true
}

func (m *subscriptions) nextSubIDLocked() uint32 {
	for {
		m.lastSub++
		if _, used := m.subs[m.lastSub]; m.lastSub != 0 && !used {
			return m.lastSub
		}
	}
}

func (m *subscriptions) nextItemIDLocked() uint32 {
	for {
		m.lastItem++
		if _, used := m.items[m.lastItem]; m.lastItem != 0 && !used {
			return m.lastItem
		}
	}
}

// deleteItemLocked forgets an item; the caller compacts its
// subscription's ready list.
func (m *subscriptions) deleteItemLocked(it *monitoredItem) {
	m.unqueueLocked(it)
	delete(it.sub.items, it.id)
	delete(m.items, it.id)
	delete(m.eventItems, it.id)
	if watchers := m.byNode[it.key]; watchers != nil {
		delete(watchers, it.id)
		if len(watchers) == 0 {
			delete(m.byNode, it.key)
		}
	}
}

func (m *subscriptions) deleteSubLocked(sub *subscription) {
	for _, it := range sub.items {
		m.deleteItemLocked(it)
	}
	for len(sub.retained) > 0 {
		m.forgetLocked(sub, len(sub.retained)-1)
	}
	sub.ready = nil
	delete(m.subs, sub.id)
	delete(sub.sess.subs, sub.id)
	m.countLocked()
}

// count is how many subscriptions exist.
func (m *subscriptions) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.subs)
}

func (m *subscriptions) countLocked() {
	m.metrics.subscriptions.Set(float64(len(m.subs)))
	m.metrics.monitoredItems.Set(float64(len(m.items)))
}

// dropSession deletes everything a session left behind: it was closed or
// its session table entry dropped. Its queued Publish requests are
// answered BadSessionClosed.
func (m *subscriptions) dropSession(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess, ok := m.sessions[key]
	if !ok {
		return
	}
	for _, sub := range sess.subs {
		m.deleteSubLocked(sub)
	}
	now := m.clock.Now()
	for _, p := range sess.queue {
		m.answerLocked(sess, p, serviceFault(p.header, ua.StatusBadSessionClosed, now))
	}
	sess.queue, sess.notes = nil, nil
	m.settleLocked(sess)
}

// close stops the engine: nothing is sent any more, everything is
// forgotten, and senders still writing get a bounded wait. The wall clock
// is used on purpose: a bounded shutdown wait, not a decision tests drive.
func (m *subscriptions) close() {
	m.mu.Lock()
	m.closed = true
	m.subs = make(map[uint32]*subscription)
	m.items = make(map[uint32]*monitoredItem)
	m.byNode = make(map[string]map[uint32]*monitoredItem)
	m.sessions = make(map[string]*subSession)
	m.eventItems = make(map[uint32]*monitoredItem)
	m.retainedBytes = 0
	m.countLocked()
	m.mu.Unlock()
	if !waitWithin(&m.senders, closeWait) {
		m.log.Warn().Dur("waited", closeWait).Msg("opcua publish responses still being written at close; their connections hold them")
	}
}
