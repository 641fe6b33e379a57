package opcua

import (
	"math"
	"time"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uasc"
)

// The Subscription and MonitoredItem services, as server.Handlers. They
// run on the library's request goroutine behind guard (an activated
// session is required; panics are recovered). A subscription and its
// items are usable only from the session that created the subscription:
// another session's ids are as unknown as ids never issued.

// checkCount is Server.checkCount for the engine: MaxNodesPerRequest
// bounds the ids or items of one request.
func (m *subscriptions) checkCount(n int) error {
	return checkCount(n, m.limits.maxPerRequest, m.metrics)
}

// revise clamps requested subscription parameters: the publishing interval
// to the configured range, the keep-alive count to [1, 1000] (0 asks for
// the default, 10), the lifetime count to at least three keep-alive
// periods (the spec's minimum) and at most maxLifetime beyond that.
func (m *subscriptions) revise(intervalMS float64, keepAlive, lifetime uint32) (time.Duration, uint32, uint32) {
	ms := clampFloat(intervalMS, float64(m.limits.minInterval/time.Millisecond), float64(m.limits.maxInterval/time.Millisecond))
	interval := time.Duration(ms * float64(time.Millisecond))
	if keepAlive == 0 {
		keepAlive = 10
	}
	keepAlive = min(keepAlive, maxKeepAliveCount)
	ceiling := max(3*keepAlive, uint32(min(float64(maxLifetime/interval), math.MaxUint32)))
	lifetime = min(max(lifetime, 3*keepAlive), ceiling)
	return interval, keepAlive, lifetime
}

// ownedLocking finds the subscription id of the request's session after
// checking count (the request's ids or items; negative: none to check),
// and returns it with the engine's lock held: the caller unlocks it. On an
// error the lock is not held.
func (m *subscriptions) ownedLocking(h *ua.RequestHeader, id uint32, count int) (*subscription, time.Time, error) {
	if count >= 0 {
		if err := m.checkCount(count); err != nil {
			return nil, time.Time{}, err
		}
	}
	now := m.clock.Now()
	m.mu.Lock()
	sub, ok := m.ownedLocked(tokenKey(h.AuthenticationToken), id)
	if !ok {
		m.mu.Unlock()
		return nil, time.Time{}, ua.StatusBadSubscriptionIDInvalid
	}
	return sub, now, nil
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (m *subscriptions) createSubscription(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.CreateSubscriptionRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	interval, keepAlive, lifetime := m.revise(req.RequestedPublishingInterval, req.RequestedMaxKeepAliveCount, req.RequestedLifetimeCount)
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ua.StatusBadShutdown
	}
	sess := m.sessionLocked(tokenKey(req.RequestHeader.AuthenticationToken))
	if len(sess.subs) >= maxSubscriptionsPerSession || len(m.subs) >= maxSubscriptions {
		m.settleLocked(sess)
		return nil, ua.StatusBadTooManySubscriptions
	}
	sub := &subscription{
		id: m.nextSubIDLocked(), sess: sess,
		interval: interval, keepAlive: keepAlive, lifetime: lifetime,
		maxNotes: req.MaxNotificationsPerPublish, publishing: req.PublishingEnabled,
		items:    make(map[uint32]*monitoredItem),
		nextTick: now.Add(interval),
		// The first message goes out at the end of the first interval,
		// data or a keep-alive, so the client knows the subscription
		// works (Part 4, 5.13.1.1).
		keepAliveTick: keepAlive - 1,
	}
	m.subs[sub.id] = sub
	sess.subs[sub.id] = sub
	m.countLocked()
	m.poke()
	return &ua.CreateSubscriptionResponse{
		ResponseHeader:            responseHeader(req.RequestHeader, now),
		SubscriptionID:            sub.id,
		RevisedPublishingInterval: millis(interval),
		RevisedLifetimeCount:      lifetime,
		RevisedMaxKeepAliveCount:  keepAlive,
	}, nil
}

func (m *subscriptions) modifySubscription(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.ModifySubscriptionRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	interval, keepAlive, lifetime := m.revise(req.RequestedPublishingInterval, req.RequestedMaxKeepAliveCount, req.RequestedLifetimeCount)
	sub, now, err := m.ownedLocking(req.RequestHeader, req.SubscriptionID, -1)
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if interval != sub.interval {
		sub.interval = interval
		sub.nextTick = now.Add(interval)
	}
	sub.keepAlive, sub.lifetime, sub.maxNotes = keepAlive, lifetime, req.MaxNotificationsPerPublish
	sub.keepAliveTick = min(sub.keepAliveTick, keepAlive-1)
	sub.lifetimeTick = 0
	m.poke()
	return &ua.ModifySubscriptionResponse{
		ResponseHeader:            responseHeader(req.RequestHeader, now),
		RevisedPublishingInterval: millis(interval),
		RevisedLifetimeCount:      lifetime,
		RevisedMaxKeepAliveCount:  keepAlive,
	}, nil
}

func (m *subscriptions) setPublishingMode(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.SetPublishingModeRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if err := m.checkCount(len(req.SubscriptionIDs)); err != nil {
		return nil, err
	}
	key := tokenKey(req.RequestHeader.AuthenticationToken)
	results := make([]ua.StatusCode, len(req.SubscriptionIDs))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range req.SubscriptionIDs {
		sub, ok := m.ownedLocked(key, id)
		if !ok {
			results[i] = ua.StatusBadSubscriptionIDInvalid
			continue
		}
		sub.publishing = req.PublishingEnabled
		results[i] = ua.StatusOK
	}
	return &ua.SetPublishingModeResponse{ResponseHeader: responseHeader(req.RequestHeader, m.clock.Now()), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

// publish queues a Publish request, or answers it at once when a
// subscription of the session is late or a status note waits. It answers
// later through the session's sender, so the library sends nothing now.
func (m *subscriptions) publish(sc *uasc.SecureChannel, r ua.Request, reqID uint32) (ua.Response, error) {
	req, ok := r.(*ua.PublishRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	now := m.clock.Now()
	key := tokenKey(req.RequestHeader.AuthenticationToken)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ua.StatusBadShutdown
	}
	// Acknowledgements free their messages from the retransmission
	// queues, whatever becomes of the request itself.
	acks := make([]ua.StatusCode, len(req.SubscriptionAcknowledgements))
	for i, a := range req.SubscriptionAcknowledgements {
		acks[i] = ua.StatusBadSubscriptionIDInvalid
		if a != nil {
			if sub, ok := m.ownedLocked(key, a.SubscriptionID); ok {
				acks[i] = m.acknowledgeLocked(sub, a.SequenceNumber)
			}
		}
	}
	sess, ok := m.sessions[key]
	if !ok || (len(sess.subs) == 0 && len(sess.notes) == 0) {
		return serviceFault(req.RequestHeader, ua.StatusBadNoSubscription, now), nil
	}
	p := pendingPublish{sc: sc, reqID: reqID, header: req.RequestHeader, acks: acks}
	if hint := req.RequestHeader.TimeoutHint; hint > 0 {
		p.deadline = now.Add(time.Duration(hint) * time.Millisecond)
	}
	for _, sub := range sess.subs {
		sub.lifetimeTick = 0
	}
	if len(sess.notes) > 0 {
		n := sess.notes[0]
		sess.notes = sess.notes[1:]
		m.answerLocked(sess, p, &ua.PublishResponse{
			ResponseHeader:           responseHeader(req.RequestHeader, now),
			SubscriptionID:           n.sub,
			AvailableSequenceNumbers: []uint32{},
			NotificationMessage: &ua.NotificationMessage{SequenceNumber: n.seq, PublishTime: now, NotificationData: []*ua.ExtensionObject{
				ua.NewExtensionObject(&ua.StatusChangeNotification{Status: ua.StatusBadTimeout, DiagnosticInfo: &ua.DiagnosticInfo{}}),
			}},
			Results:         acks,
			DiagnosticInfos: []*ua.DiagnosticInfo{},
		})
		return nil, nil
	}
	var late *subscription
	for _, sub := range sess.subs {
		if sub.late && (late == nil || sub.lateSince.Before(late.lateSince) || (sub.lateSince.Equal(late.lateSince) && sub.id < late.id)) {
			late = sub
		}
	}
	if late != nil {
		m.answerLocked(sess, p, m.messageLocked(late, p, now))
		return nil, nil
	}
	if len(sess.queue)+len(sess.outbox) >= maxPublishRequests {
		return serviceFault(req.RequestHeader, ua.StatusBadTooManyPublishRequests, now), nil
	}
	sess.queue = append(sess.queue, p)
	return nil, nil
}

// republish gives back a message of the subscription's retransmission
// queue, the very one sent (Part 4, 5.13.6); one acknowledged or dropped
// from a full queue, or never sent, is BadMessageNotAvailable.
func (m *subscriptions) republish(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.RepublishRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	sub, now, err := m.ownedLocking(req.RequestHeader, req.SubscriptionID, -1)
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	i := sub.retainedIndex(req.RetransmitSequenceNumber)
	if i < 0 {
		return nil, ua.StatusBadMessageNotAvailable
	}
	return &ua.RepublishResponse{ResponseHeader: responseHeader(req.RequestHeader, now), NotificationMessage: sub.retained[i].msg}, nil
}

func unsupported(ua.Request) (ua.Response, error) { return nil, ua.StatusBadServiceUnsupported }

// transferSubscriptions is not supported: a client that lost its session
// creates its subscriptions again (gopcua's client does).
func (m *subscriptions) transferSubscriptions(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	return unsupported(r)
}

// setTriggering is not supported: no item triggers another.
func (m *subscriptions) setTriggering(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	return unsupported(r)
}

func (m *subscriptions) deleteSubscriptions(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.DeleteSubscriptionsRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if err := m.checkCount(len(req.SubscriptionIDs)); err != nil {
		return nil, err
	}
	key := tokenKey(req.RequestHeader.AuthenticationToken)
	results := make([]ua.StatusCode, len(req.SubscriptionIDs))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range req.SubscriptionIDs {
		sub, ok := m.ownedLocked(key, id)
		if !ok {
			results[i] = ua.StatusBadSubscriptionIDInvalid
			continue
		}
		m.deleteSubLocked(sub)
		results[i] = ua.StatusOK
	}
	if sess, ok := m.sessions[key]; ok {
		m.settleLocked(sess)
	}
	return &ua.DeleteSubscriptionsResponse{ResponseHeader: responseHeader(req.RequestHeader, m.clock.Now()), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

// --- monitored items ---

// changeFilter is a monitored item's DataChangeFilter (Part 4, 7.22.2):
// its trigger, and an absolute deadband (0: none) a numeric value must
// move by, from the last value reported, to be reported again. A percent
// deadband keeps its percentage: the absolute deadband it amounts to is
// worked out again from the EURange the variable has when a value comes
// (current), as a deploy may change the range.
type changeFilter struct {
	trigger  ua.DataChangeTrigger
	deadband float64
	percent  float64 // of the EURange, when isPercent
	// isPercent: the deadband is percent of the current EURange.
	isPercent bool
}

// current is f with the deadband a percent deadband amounts to for the
// range rng gives now; a variable whose range a deploy removed reports
// every change.
func (f changeFilter) current(rng func() (low, high float64, ok bool)) changeFilter {
	if !f.isPercent {
		return f
	}
	f.deadband = 0
	if low, high, ok := rng(); ok {
		f.deadband = f.percent / 100 * (high - low)
	}
	return f
}

// itemFilter reads a monitored item's filter: none is StatusValue without
// deadband. An absolute deadband is applied to numeric values; a percent
// deadband (Part 8, 6.2: a percentage of the item's EURange, 0 to 100)
// becomes the absolute deadband it amounts to for the range rng returns,
// and is refused where the item has no EURange (BadFilterNotAllowed);
// other filters (events, aggregates) are not supported.
func itemFilter(f *ua.ExtensionObject, rng func() (low, high float64, ok bool)) (changeFilter, ua.StatusCode) {
	if f == nil || f.Value == nil {
		return changeFilter{trigger: ua.DataChangeTriggerStatusValue}, ua.StatusOK
	}
	dc, ok := f.Value.(*ua.DataChangeFilter)
	if !ok {
		return changeFilter{}, ua.StatusBadMonitoredItemFilterUnsupported
	}
	switch dc.Trigger {
	case ua.DataChangeTriggerStatus, ua.DataChangeTriggerStatusValue, ua.DataChangeTriggerStatusValueTimestamp:
	default:
		return changeFilter{}, ua.StatusBadMonitoredItemFilterInvalid
	}
	out := changeFilter{trigger: dc.Trigger}
	switch ua.DeadbandType(dc.DeadbandType) {
	case ua.DeadbandTypeNone:
	case ua.DeadbandTypeAbsolute:
		if math.IsNaN(dc.DeadbandValue) || math.IsInf(dc.DeadbandValue, 0) || dc.DeadbandValue < 0 {
			return changeFilter{}, ua.StatusBadDeadbandFilterInvalid
		}
		out.deadband = dc.DeadbandValue
	case ua.DeadbandTypePercent:
		low, high, ok := rng()
		if !ok {
			return changeFilter{}, ua.StatusBadFilterNotAllowed
		}
		if math.IsNaN(dc.DeadbandValue) || dc.DeadbandValue < 0 || dc.DeadbandValue > 100 {
			return changeFilter{}, ua.StatusBadDeadbandFilterInvalid
		}
		out.isPercent, out.percent = true, dc.DeadbandValue
		out.deadband = dc.DeadbandValue / 100 * (high - low)
	default:
		return changeFilter{}, ua.StatusBadDeadbandFilterInvalid
	}
	return out, ua.StatusOK
}

func validMode(mode ua.MonitoringMode) bool {
	return mode == ua.MonitoringModeDisabled || mode == ua.MonitoringModeSampling || mode == ua.MonitoringModeReporting
}

// checkItem validates one item to create; a non-OK code is its result.
func (m *subscriptions) checkItem(it *ua.MonitoredItemCreateRequest) (changeFilter, ua.StatusCode) {
	switch {
	case it == nil || it.ItemToMonitor == nil || it.ItemToMonitor.NodeID == nil || it.RequestedParameters == nil:
		return changeFilter{}, ua.StatusBadNodeIDInvalid
	case !m.exists(it.ItemToMonitor.NodeID):
		return changeFilter{}, ua.StatusBadNodeIDUnknown
	case it.ItemToMonitor.AttributeID != ua.AttributeIDValue:
		return changeFilter{}, ua.StatusBadAttributeIDInvalid
	case it.ItemToMonitor.IndexRange != "":
		return changeFilter{}, ua.StatusBadIndexRangeInvalid
	case !validMode(it.MonitoringMode):
		return changeFilter{}, ua.StatusBadMonitoringModeInvalid
	}
	return itemFilter(it.RequestedParameters.Filter, m.rangeOf(it.ItemToMonitor.NodeID))
}

// rangeOf is the EURange lookup of the item watching nid.
func (m *subscriptions) rangeOf(nid *ua.NodeID) func() (float64, float64, bool) {
	return func() (float64, float64, bool) {
		if m.euRange == nil {
			return 0, 0, false
		}
		return m.euRange(nid)
	}
}

func (m *subscriptions) createMonitoredItems(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.CreateMonitoredItemsRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if req.TimestampsToReturn > ua.TimestampsToReturnNeither {
		return nil, ua.StatusBadTimestampsToReturnInvalid
	}
	sub, now, err := m.ownedLocking(req.RequestHeader, req.SubscriptionID, len(req.ItemsToCreate))
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	results := make([]*ua.MonitoredItemCreateResult, len(req.ItemsToCreate))
	for i, itReq := range req.ItemsToCreate {
		if itReq != nil && itReq.ItemToMonitor != nil && itReq.ItemToMonitor.NodeID != nil && itReq.ItemToMonitor.AttributeID == ua.AttributeIDEventNotifier {
			results[i] = m.createEventItemLocked(sub, itReq, req.TimestampsToReturn)
			continue
		}
		filter, code := m.checkItem(itReq)
		if code == ua.StatusOK && len(sub.items) >= maxItemsPerSubscription {
			code = ua.StatusBadTooManyMonitoredItems
		}
		if code != ua.StatusOK {
			results[i] = &ua.MonitoredItemCreateResult{StatusCode: code, FilterResult: ua.NewExtensionObject(nil)}
			continue
		}
		nid := itReq.ItemToMonitor.NodeID
		it := &monitoredItem{
			id: m.nextItemIDLocked(), sub: sub, node: nid, key: nid.String(),
			handle: itReq.RequestedParameters.ClientHandle, mode: itReq.MonitoringMode,
			filter: filter, timestamps: req.TimestampsToReturn,
		}
		m.items[it.id] = it
		sub.items[it.id] = it
		if m.byNode[it.key] == nil {
			m.byNode[it.key] = make(map[uint32]*monitoredItem)
		}
		m.byNode[it.key][it.id] = it
		// The first sample is the current value, reported whatever the
		// trigger: clients expect it right after creating the item.
		m.sampleLocked(it, m.read(nid), true)
		results[i] = &ua.MonitoredItemCreateResult{
			StatusCode:              ua.StatusOK,
			MonitoredItemID:         it.id,
			RevisedSamplingInterval: millis(sub.interval),
			RevisedQueueSize:        1,
			FilterResult:            ua.NewExtensionObject(nil),
		}
	}
	m.countLocked()
	return &ua.CreateMonitoredItemsResponse{ResponseHeader: responseHeader(req.RequestHeader, now), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

func (m *subscriptions) modifyMonitoredItems(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.ModifyMonitoredItemsRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if req.TimestampsToReturn > ua.TimestampsToReturnNeither {
		return nil, ua.StatusBadTimestampsToReturnInvalid
	}
	sub, now, err := m.ownedLocking(req.RequestHeader, req.SubscriptionID, len(req.ItemsToModify))
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	results := make([]*ua.MonitoredItemModifyResult, len(req.ItemsToModify))
	for i, mod := range req.ItemsToModify {
		res := &ua.MonitoredItemModifyResult{FilterResult: ua.NewExtensionObject(nil)}
		results[i] = res
		var it *monitoredItem
		if mod != nil {
			it = sub.items[mod.MonitoredItemID]
		}
		if it == nil {
			res.StatusCode = ua.StatusBadMonitoredItemIDInvalid
			continue
		}
		if mod.RequestedParameters == nil {
			res.StatusCode = ua.StatusBadNothingToDo
			continue
		}
		if it.ev != nil {
			m.modifyEventItemLocked(it, mod.RequestedParameters, req.TimestampsToReturn, res)
			continue
		}
		filter, code := itemFilter(mod.RequestedParameters.Filter, m.rangeOf(it.node))
		if code != ua.StatusOK {
			res.StatusCode = code
			continue
		}
		it.handle, it.filter, it.timestamps = mod.RequestedParameters.ClientHandle, filter, req.TimestampsToReturn
		res.StatusCode, res.RevisedSamplingInterval, res.RevisedQueueSize = ua.StatusOK, millis(sub.interval), 1
	}
	return &ua.ModifyMonitoredItemsResponse{ResponseHeader: responseHeader(req.RequestHeader, now), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

// setMonitoringMode: Disabled forgets the item's unsent value; enabling a
// disabled item samples its current value again, as on creation; Sampling
// keeps the latest value without reporting it until Reporting.
func (m *subscriptions) setMonitoringMode(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.SetMonitoringModeRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	if !validMode(req.MonitoringMode) {
		return nil, ua.StatusBadMonitoringModeInvalid
	}
	sub, now, err := m.ownedLocking(req.RequestHeader, req.SubscriptionID, len(req.MonitoredItemIDs))
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	results := make([]ua.StatusCode, len(req.MonitoredItemIDs))
	for i, id := range req.MonitoredItemIDs {
		it, ok := sub.items[id]
		if !ok {
			results[i] = ua.StatusBadMonitoredItemIDInvalid
			continue
		}
		results[i] = ua.StatusOK
		was := it.mode
		it.mode = req.MonitoringMode
		switch {
		case it.mode == was:
		case it.mode == ua.MonitoringModeDisabled:
			m.unqueueLocked(it)
			it.pending, it.last = nil, nil
			if it.ev != nil {
				it.ev.queue, it.ev.refreshQueued = nil, 0
			}
		case was == ua.MonitoringModeDisabled && it.ev != nil:
			// An event item reports events from now on; none is replayed.
		case was == ua.MonitoringModeDisabled:
			m.sampleLocked(it, m.read(it.node), true)
		case it.mode == ua.MonitoringModeReporting:
			m.queueLocked(it)
		default: // Reporting -> Sampling
			m.unqueueLocked(it)
		}
	}
	m.compactLocked(sub)
	return &ua.SetMonitoringModeResponse{ResponseHeader: responseHeader(req.RequestHeader, now), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}

func (m *subscriptions) deleteMonitoredItems(_ *uasc.SecureChannel, r ua.Request, _ uint32) (ua.Response, error) {
	req, ok := r.(*ua.DeleteMonitoredItemsRequest)
	if !ok {
		return nil, ua.StatusBadRequestTypeInvalid
	}
	sub, now, err := m.ownedLocking(req.RequestHeader, req.SubscriptionID, len(req.MonitoredItemIDs))
	if err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	results := make([]ua.StatusCode, len(req.MonitoredItemIDs))
	for i, id := range req.MonitoredItemIDs {
		it, ok := sub.items[id]
		if !ok {
			results[i] = ua.StatusBadMonitoredItemIDInvalid
			continue
		}
		m.deleteItemLocked(it)
		results[i] = ua.StatusOK
	}
	m.compactLocked(sub)
	m.countLocked()
	return &ua.DeleteMonitoredItemsResponse{ResponseHeader: responseHeader(req.RequestHeader, now), Results: results, DiagnosticInfos: []*ua.DiagnosticInfo{}}, nil
}
