package opcua

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// Condition is one alarm condition as OPC UA clients see it (Part 9): a
// native alarm of the gateway (OffNormalAlarmType) or a limit alarm
// scadad evaluates (ExclusiveLimitAlarmType). The daemon fills it from the
// replicated alarm state, so every voter shows the same conditions with
// the same EventIds.
type Condition struct {
	// ID is the alarm's id, unique on the site.
	ID string
	// Source names what the alarm is about: an instance's name when it is
	// one (the condition is then a component of its folder).
	Source string
	// Name is the ConditionName; Message and Severity (1–1000) the event's.
	Name     string
	Message  string
	Severity uint16
	// Limit marks a limit alarm; State is its level (HiHi, Hi, Lo, LoLo or
	// Normal).
	Limit bool
	State string
	// The condition's state.
	Active, Acked, Confirmed, Shelved bool
	// Time is when the last transition happened in the field.
	Time time.Time
	// Seq numbers the alarm's transitions: the EventId of the condition's
	// last event is (ID, Seq), the same on every voter.
	Seq uint64
	// Comment is the last comment (an acknowledgement's or AddComment's)
	// and User who made it (or acknowledged).
	Comment string
	User    string
}

// AlarmActions are the operator actions the Call service forwards: the
// daemon's alarm service (alarms.Service) is one. Acknowledge and Confirm
// are refused on a node that is not the Active with an error carrying a
// GateReason (answered BadInvalidState); AddComment may be made on any.
type AlarmActions interface {
	Acknowledge(ctx context.Context, id, operator, comment string) error
	Confirm(ctx context.Context, id, operator, comment string) error
	Comment(ctx context.Context, id, operator, comment string) error
}

// gateRefusal is an AlarmActions error saying the role gate refused.
type gateRefusal interface{ GateReason() string }

// The node ids of conditions: "alarm:<id>" (no instance or attribute
// name has a ':'), their fields "alarm:<id>|<browse path>".
const (
	conditionPrefix = "alarm:"
	fieldSep        = "|"
)

// conditionTable is the server's copy of the site's conditions. Its lock
// is taken after the site namespace's, never before it.
type conditionTable struct {
	mu       sync.RWMutex
	byID     map[string]*conditionEntry
	bySource map[string][]string // source -> condition ids, sorted
}

type conditionEntry struct {
	c        Condition
	received time.Time // ReceiveTime of its last event
}

func newConditionTable() *conditionTable {
	return &conditionTable{byID: map[string]*conditionEntry{}, bySource: map[string][]string{}}
}

// set replaces every condition; put adds or replaces one. Both report the
// entry as stored.
func (t *conditionTable) set(cs []Condition, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID = make(map[string]*conditionEntry, len(cs))
	t.bySource = map[string][]string{}
	for _, c := range cs {
		t.putLocked(c, now)
	}
}

func (t *conditionTable) put(c Condition, now time.Time) conditionEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.putLocked(c, now)
}

func (t *conditionTable) putLocked(c Condition, now time.Time) conditionEntry {
	c.Severity = min(max(c.Severity, 1), 1000)
	if old, ok := t.byID[c.ID]; ok && old.c.Source != c.Source {
		t.bySource[old.c.Source] = slices.DeleteFunc(t.bySource[old.c.Source], func(x string) bool { return x == c.ID })
	}
	if _, ok := t.byID[c.ID]; !ok || !slices.Contains(t.bySource[c.Source], c.ID) {
		ids := t.bySource[c.Source]
		i, _ := slices.BinarySearch(ids, c.ID)
		t.bySource[c.Source] = slices.Insert(ids, i, c.ID)
	}
	e := &conditionEntry{c: c, received: now}
	t.byID[c.ID] = e
	return *e
}

func (t *conditionTable) get(id string) (conditionEntry, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.byID[id]
	if !ok {
		return conditionEntry{}, false
	}
	return *e, true
}

// retained lists the conditions a ConditionRefresh replays, in id order.
func (t *conditionTable) retained() []conditionEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]conditionEntry, 0, len(t.byID))
	for _, e := range t.byID {
		if retain(e.c) {
			out = append(out, *e)
		}
	}
	slices.SortFunc(out, func(a, b conditionEntry) int { return strings.Compare(a.c.ID, b.c.ID) })
	return out
}

func (t *conditionTable) ofSource(source string) []conditionEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ids := t.bySource[source]
	out := make([]conditionEntry, 0, len(ids))
	for _, id := range ids {
		out = append(out, *t.byID[id])
	}
	return out
}

// sources lists the sources that have conditions.
func (t *conditionTable) sources() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.bySource))
	for s, ids := range t.bySource {
		if len(ids) > 0 {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// retain is the Retain field (Part 9, 5.5.2): a condition is of interest
// while it is active or waits for an acknowledgement.
func retain(c Condition) bool { return c.Active || !c.Acked }

// eventID is the EventId of c's last event: the same on every voter, so a
// client that moved to the other server acknowledges with what it got.
func eventID(c Condition) []byte {
	return []byte(c.ID + "\x00" + strconv.FormatUint(c.Seq, 10))
}

func (ns *siteNamespace) conditionID(alarm string) *ua.NodeID {
	return ua.NewStringNodeID(ns.idx, conditionPrefix+alarm)
}

// conditionType is the condition's ObjectType.
func conditionType(c Condition) uint32 {
	if c.Limit {
		return id.ExclusiveLimitAlarmType
	}
	return id.OffNormalAlarmType
}

func conditionTypeName(c Condition) string {
	if c.Limit {
		return "ExclusiveLimitAlarmType"
	}
	return "OffNormalAlarmType"
}

// limitStateNames are the ExclusiveLimitStateMachineType states (Part 9,
// 5.8.12.2) of the limit levels.
var limitStateNames = map[string]string{"HiHi": "HighHigh", "Hi": "High", "Lo": "Low", "LoLo": "LowLow"}

// stateText is a TwoStateVariable's value: the state's name.
func stateText(on bool, yes, no string) *ua.LocalizedText {
	if on {
		return localized(yes)
	}
	return localized(no)
}

// conditionFields are the event fields of a condition's event, by browse
// path ("ActiveState/Id"); the standard fields of BaseEventType,
// ConditionType, AcknowledgeableConditionType, AlarmConditionType and
// ExclusiveLimitAlarmType that scadad fills.
func (ns *siteNamespace) conditionFields(e conditionEntry) map[string]any {
	c := e.c
	f := map[string]any{
		"EventId":                 eventID(c),
		"EventType":               ua.NewNumericNodeID(0, conditionType(c)),
		"SourceNode":              ns.folderID(c.Source),
		"SourceName":              c.Source,
		"Time":                    c.Time,
		"ReceiveTime":             e.received,
		"Message":                 localized(c.Message),
		"Severity":                c.Severity,
		"ConditionClassId":        ua.NewNumericNodeID(0, id.ProcessConditionClassType),
		"ConditionClassName":      localized("ProcessConditionClassType"),
		"ConditionName":           c.Name,
		"BranchId":                ua.NewTwoByteNodeID(0),
		"Retain":                  retain(c),
		"EnabledState":            localized("Enabled"),
		"EnabledState/Id":         true,
		"Quality":                 ua.StatusOK,
		"LastSeverity":            c.Severity,
		"Comment":                 localized(c.Comment),
		"ClientUserId":            c.User,
		"AckedState":              stateText(c.Acked, "Acknowledged", "Unacknowledged"),
		"AckedState/Id":           c.Acked,
		"ConfirmedState":          stateText(c.Confirmed, "Confirmed", "Unconfirmed"),
		"ConfirmedState/Id":       c.Confirmed,
		"ActiveState":             stateText(c.Active, "Active", "Inactive"),
		"ActiveState/Id":          c.Active,
		"SuppressedOrShelved":     c.Shelved,
		"InputNode":               ua.NewTwoByteNodeID(0),
		"LimitState/CurrentState": localized(""),
	}
	if c.Limit {
		f["LimitState/CurrentState"] = localized(limitStateNames[c.State])
	} else {
		delete(f, "LimitState/CurrentState")
	}
	return f
}

// conditionEvent is the event a condition's transition (or a refresh of
// it) reports.
func (ns *siteNamespace) conditionEvent(e conditionEntry) *event {
	return &event{
		typeID:    conditionType(e.c),
		source:    e.c.Source,
		condition: ns.conditionID(e.c.ID),
		fields:    ns.conditionFields(e),
	}
}

// SetConditions replaces the server's conditions with cs (at start, and
// when the daemon re-reads the replicated state): no event is reported.
func (s *Server) SetConditions(cs []Condition) {
	s.conds.set(cs, s.clock.Now())
}

// ConditionChanged records one transition of a condition and reports its
// event to the event monitored items of every session that watch its
// source or the Server object.
func (s *Server) ConditionChanged(c Condition) {
	e := s.conds.put(c, s.clock.Now())
	s.subs.event(s.ns.conditionEvent(e))
}
