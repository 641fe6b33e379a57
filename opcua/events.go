package opcua

import (
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// Event monitored items (Part 4, 5.12.1.2 and 7.22.3): an item on the
// EventNotifier attribute of the Server object (every event) or of an
// instance's folder (the events of its conditions), with an EventFilter.
// Unlike a data item, which keeps only its latest value, an event item
// queues every event its filter passes, up to its queue size; past it the
// oldest is dropped and counted (scadad_opcua_events_dropped_total). The
// events a ConditionRefresh queues do not count against the queue size
// (a refresh replays every retained condition, and a client asks for it
// to see them all), and one refresh at a time may wait in an item's queue.

const (
	// defaultEventQueue is an event item's queue when the client asks
	// for 0; maxEventQueue caps what it may ask for.
	defaultEventQueue = 1000
	maxEventQueue     = 10000
)

type eventItem struct {
	// source is the instance whose conditions' events the item reports;
	// all (the Server object) reports every event.
	source    string
	all       bool
	filter    *eventFilter
	queueSize int
	queue     []queuedEvent
	// refreshQueued counts the queued events of a ConditionRefresh.
	refreshQueued int
}

type queuedEvent struct {
	fields  *ua.EventFieldList
	refresh bool
}

func reviseEventQueue(requested uint32) int {
	if requested == 0 {
		return defaultEventQueue
	}
	return int(min(requested, maxEventQueue))
}

// event reports ev to every event item whose notifier and filter take it.
func (m *subscriptions) event(ev *event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, it := range m.eventItems {
		if it.ev.all || it.ev.source == ev.source {
			m.offerEventLocked(it, ev, false)
		}
	}
}

// offerEventLocked queues ev on it if its where clause passes.
func (m *subscriptions) offerEventLocked(it *monitoredItem, ev *event, refresh bool) {
	if it.mode == ua.MonitoringModeDisabled || !it.ev.filter.matches(ev) {
		return
	}
	q := &it.ev.queue
	if !refresh && len(*q)-it.ev.refreshQueued >= it.ev.queueSize {
		// Drop the oldest ordinary event (discardOldest, the default).
		for i, e := range *q {
			if !e.refresh {
				*q = append((*q)[:i], (*q)[i+1:]...)
				m.metrics.eventsDropped.Inc()
				break
			}
		}
	}
	*q = append(*q, queuedEvent{fields: it.ev.filter.fieldList(it.handle, ev), refresh: refresh})
	if refresh {
		it.ev.refreshQueued++
	}
	if it.mode == ua.MonitoringModeReporting {
		m.queueLocked(it)
	}
}

// takeEventsLocked moves the item's queued events into out while the
// message has room (limit notifications, maxMessageBytes; at least one
// into an empty message), and reports whether the queue is empty.
func (m *subscriptions) takeEventsLocked(it *monitoredItem, limit int, size *int, out *[]*ua.EventFieldList) bool {
	q := it.ev.queue
	n := 0
	for n < len(q) && len(*out) < limit {
		sz := approxEventSize(q[n].fields)
		if *size > 0 && *size+sz > maxMessageBytes {
			break
		}
		*size += sz
		*out = append(*out, q[n].fields)
		if q[n].refresh {
			it.ev.refreshQueued--
		}
		n++
	}
	clear(q[:n])
	it.ev.queue = q[n:]
	if len(it.ev.queue) == 0 {
		it.ev.queue = nil
		return true
	}
	return false
}

// approxEventSize estimates an event's encoded size.
func approxEventSize(f *ua.EventFieldList) int {
	size := 16
	for _, v := range f.EventFields {
		size += 16
		if v == nil {
			continue
		}
		switch x := v.Value().(type) {
		case string:
			size += len(x)
		case []byte:
			size += len(x)
		case *ua.LocalizedText:
			if x != nil {
				size += len(x.Text) + len(x.Locale)
			}
		case *ua.NodeID:
			if x != nil {
				size += len(x.StringID())
			}
		}
	}
	return size
}

// createEventItemLocked makes an event monitored item on sub, or says why
// not.
func (m *subscriptions) createEventItemLocked(sub *subscription, r *ua.MonitoredItemCreateRequest, ts ua.TimestampsToReturn) *ua.MonitoredItemCreateResult {
	fail := func(code ua.StatusCode, fr *ua.EventFilterResult) *ua.MonitoredItemCreateResult {
		res := &ua.MonitoredItemCreateResult{StatusCode: code, FilterResult: ua.NewExtensionObject(nil)}
		if fr != nil {
			res.FilterResult = ua.NewExtensionObject(fr)
		}
		return res
	}
	nid := r.ItemToMonitor.NodeID
	switch {
	case r.RequestedParameters == nil:
		return fail(ua.StatusBadNodeIDInvalid, nil)
	case !m.exists(nid):
		return fail(ua.StatusBadNodeIDUnknown, nil)
	case r.ItemToMonitor.IndexRange != "":
		return fail(ua.StatusBadIndexRangeInvalid, nil)
	case !validMode(r.MonitoringMode):
		return fail(ua.StatusBadMonitoringModeInvalid, nil)
	}
	source, all, ok := m.notifierOf(nid)
	if !ok {
		return fail(ua.StatusBadAttributeIDInvalid, nil)
	}
	ef, isEvent := extensionValue[*ua.EventFilter](r.RequestedParameters.Filter)
	if !isEvent {
		return fail(ua.StatusBadEventFilterInvalid, nil)
	}
	filter, fr, code := compileEventFilter(ef)
	if code != ua.StatusOK {
		return fail(code, fr)
	}
	if len(sub.items) >= maxItemsPerSubscription {
		return fail(ua.StatusBadTooManyMonitoredItems, nil)
	}
	it := &monitoredItem{
		id: m.nextItemIDLocked(), sub: sub, node: nid, key: nid.String(),
		handle: r.RequestedParameters.ClientHandle, mode: r.MonitoringMode, timestamps: ts,
		ev: &eventItem{source: source, all: all, filter: filter, queueSize: reviseEventQueue(r.RequestedParameters.QueueSize)},
	}
	m.items[it.id] = it
	sub.items[it.id] = it
	m.eventItems[it.id] = it
	res := &ua.MonitoredItemCreateResult{
		StatusCode: ua.StatusOK, MonitoredItemID: it.id,
		RevisedSamplingInterval: 0, RevisedQueueSize: uint32(it.ev.queueSize),
		FilterResult: ua.NewExtensionObject(nil),
	}
	if !allGood(fr.SelectClauseResults) {
		res.FilterResult = ua.NewExtensionObject(fr)
	}
	return res
}

// modifyEventItemLocked applies new parameters to an event item.
func (m *subscriptions) modifyEventItemLocked(it *monitoredItem, p *ua.MonitoringParameters, ts ua.TimestampsToReturn, res *ua.MonitoredItemModifyResult) {
	ef, isEvent := extensionValue[*ua.EventFilter](p.Filter)
	if !isEvent {
		res.StatusCode = ua.StatusBadEventFilterInvalid
		return
	}
	filter, fr, code := compileEventFilter(ef)
	if code != ua.StatusOK || !allGood(fr.SelectClauseResults) {
		res.FilterResult = ua.NewExtensionObject(fr)
	}
	if code != ua.StatusOK {
		res.StatusCode = code
		return
	}
	it.handle, it.timestamps = p.ClientHandle, ts
	it.ev.filter, it.ev.queueSize = filter, reviseEventQueue(p.QueueSize)
	res.StatusCode, res.RevisedQueueSize = ua.StatusOK, uint32(it.ev.queueSize)
}

func allGood(codes []ua.StatusCode) bool {
	for _, c := range codes {
		if c != ua.StatusOK {
			return false
		}
	}
	return true
}

// extensionValue is the value of an ExtensionObject if it is a T.
func extensionValue[T any](eo *ua.ExtensionObject) (T, bool) {
	var zero T
	if eo == nil || eo.Value == nil {
		return zero, false
	}
	v, ok := eo.Value.(T)
	return v, ok
}

// refreshEvent is a RefreshStartEvent or RefreshEndEvent (Part 9, 5.11.2)
// of the Server object.
func refreshEvent(typeID uint32, eventID []byte, now any) *event {
	msg := "ConditionRefresh start"
	if typeID == id.RefreshEndEventType {
		msg = "ConditionRefresh end"
	}
	return &event{typeID: typeID, fields: map[string]any{
		"EventId": eventID, "EventType": ua.NewNumericNodeID(0, typeID),
		"SourceNode": ua.NewNumericNodeID(0, id.Server), "SourceName": "Server",
		"Time": now, "ReceiveTime": now, "Message": localized(msg), "Severity": uint16(1),
	}}
}

// conditionRefresh queues, on the event items of the session's
// subscription subID (or its one item itemID, when not 0), a
// RefreshStartEvent, the events of every retained condition its filter
// passes, and a RefreshEndEvent (Part 9, 5.5.7).
func (m *subscriptions) conditionRefresh(key string, subID, itemID uint32, start, end *event, conds []*event) ua.StatusCode {
	m.mu.Lock()
	defer m.mu.Unlock()
	sub, ok := m.ownedLocked(key, subID)
	if !ok {
		return ua.StatusBadSubscriptionIDInvalid
	}
	var items []*monitoredItem
	if itemID != 0 {
		it, ok := sub.items[itemID]
		if !ok || it.ev == nil {
			return ua.StatusBadMonitoredItemIDInvalid
		}
		items = append(items, it)
	} else {
		for _, it := range sub.items {
			if it.ev != nil {
				items = append(items, it)
			}
		}
	}
	for _, it := range items {
		if it.ev.refreshQueued > 0 {
			return ua.StatusBadRefreshInProgress
		}
	}
	for _, it := range items {
		// The markers go to the client whatever its where clause: they
		// frame the replay.
		it.ev.queue = append(it.ev.queue, queuedEvent{fields: it.ev.filter.fieldList(it.handle, start), refresh: true})
		it.ev.refreshQueued++
		for _, ev := range conds {
			if it.ev.all || it.ev.source == ev.source {
				m.offerEventLocked(it, ev, true)
			}
		}
		it.ev.queue = append(it.ev.queue, queuedEvent{fields: it.ev.filter.fieldList(it.handle, end), refresh: true})
		it.ev.refreshQueued++
		if it.mode == ua.MonitoringModeReporting {
			m.queueLocked(it)
		}
	}
	return ua.StatusOK
}
