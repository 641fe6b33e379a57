package opcua

import (
	"bytes"
	"strings"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// event is one event notification before a filter picks its fields:
// its type, the source it is about ("" for the server's own events, such
// as RefreshStartEvent), the condition that reported it (nil: none) and
// its fields by browse path.
type event struct {
	typeID    uint32
	source    string
	condition *ua.NodeID
	fields    map[string]any
}

// eventSupertypes gives each event type scadad reports, and the types
// select clauses may name, its supertype (Part 5 and Part 9).
var eventSupertypes = map[uint32]uint32{
	id.BaseEventType:                0,
	id.SystemEventType:              id.BaseEventType,
	id.RefreshStartEventType:        id.SystemEventType,
	id.RefreshEndEventType:          id.SystemEventType,
	id.ConditionType:                id.BaseEventType,
	id.AcknowledgeableConditionType: id.ConditionType,
	id.AlarmConditionType:           id.AcknowledgeableConditionType,
	id.LimitAlarmType:               id.AlarmConditionType,
	id.ExclusiveLimitAlarmType:      id.LimitAlarmType,
	id.DiscreteAlarmType:            id.AlarmConditionType,
	id.OffNormalAlarmType:           id.DiscreteAlarmType,
}

// isSubtype reports whether event type t is super or one of its subtypes.
func isSubtype(t, super uint32) bool {
	for n := 0; t != 0 && n < 16; n++ {
		if t == super {
			return true
		}
		t = eventSupertypes[t]
	}
	return false
}

// eventFieldTypes gives each event field scadad knows the type that
// declares it: a select clause naming a type must name that type or one
// of its subtypes (BaseEventType names any field, Part 4, 7.4.4.5).
var eventFieldTypes = map[string]uint32{
	"EventId": id.BaseEventType, "EventType": id.BaseEventType, "SourceNode": id.BaseEventType,
	"SourceName": id.BaseEventType, "Time": id.BaseEventType, "ReceiveTime": id.BaseEventType,
	"Message": id.BaseEventType, "Severity": id.BaseEventType,
	"ConditionClassId": id.ConditionType, "ConditionClassName": id.ConditionType,
	"ConditionName": id.ConditionType, "BranchId": id.ConditionType, "Retain": id.ConditionType,
	"EnabledState": id.ConditionType, "EnabledState/Id": id.ConditionType, "Quality": id.ConditionType,
	"LastSeverity": id.ConditionType, "Comment": id.ConditionType, "ClientUserId": id.ConditionType,
	"AckedState": id.AcknowledgeableConditionType, "AckedState/Id": id.AcknowledgeableConditionType,
	"ConfirmedState": id.AcknowledgeableConditionType, "ConfirmedState/Id": id.AcknowledgeableConditionType,
	"ActiveState": id.AlarmConditionType, "ActiveState/Id": id.AlarmConditionType,
	"SuppressedOrShelved": id.AlarmConditionType, "InputNode": id.AlarmConditionType,
	"LimitState/CurrentState": id.ExclusiveLimitAlarmType,
}

// Bounds of one event filter.
const (
	maxSelectClauses = 64
	maxWhereElements = 64
)

// selectClause is a compiled SimpleAttributeOperand: the field's path, or
// the ConditionId (the NodeId attribute of ConditionType, Part 9, 5.5.2),
// and the type the client named.
type selectClause struct {
	path        string
	typeID      uint32
	conditionID bool
	valid       bool
}

// compileOperand checks one SimpleAttributeOperand against what scadad's
// events carry.
func compileOperand(op *ua.SimpleAttributeOperand) (selectClause, ua.StatusCode) {
	if op == nil {
		return selectClause{}, ua.StatusBadFilterOperandInvalid
	}
	typeID := uint32(id.BaseEventType)
	if t := op.TypeDefinitionID; t != nil && !(t.Namespace() == 0 && t.IntID() == 0 && t.Type() != ua.NodeIDTypeString) {
		if t.Namespace() != 0 || t.Type() == ua.NodeIDTypeString || t.Type() == ua.NodeIDTypeGUID || t.Type() == ua.NodeIDTypeByteString {
			return selectClause{}, ua.StatusBadTypeDefinitionInvalid
		}
		if _, ok := eventSupertypes[t.IntID()]; !ok {
			return selectClause{}, ua.StatusBadTypeDefinitionInvalid
		}
		typeID = t.IntID()
	}
	if op.IndexRange != "" {
		return selectClause{}, ua.StatusBadIndexRangeInvalid
	}
	parts := make([]string, 0, len(op.BrowsePath))
	for _, q := range op.BrowsePath {
		if q == nil || q.NamespaceIndex != 0 {
			return selectClause{}, ua.StatusBadNodeIDUnknown
		}
		parts = append(parts, q.Name)
	}
	path := strings.Join(parts, "/")
	if op.AttributeID == ua.AttributeIDNodeID && path == "" && isSubtype(typeID, id.ConditionType) {
		return selectClause{typeID: typeID, conditionID: true, valid: true}, ua.StatusOK
	}
	if op.AttributeID != ua.AttributeIDValue {
		return selectClause{}, ua.StatusBadAttributeIDInvalid
	}
	decl, ok := eventFieldTypes[path]
	if !ok || (typeID != id.BaseEventType && !isSubtype(typeID, decl)) {
		return selectClause{}, ua.StatusBadNodeIDUnknown
	}
	return selectClause{path: path, typeID: typeID, valid: true}, ua.StatusOK
}

// value is the clause's value in ev: null when the event lacks the field
// or is not of the type the client named.
func (sc selectClause) value(ev *event) any {
	if !sc.valid || (sc.typeID != id.BaseEventType && !isSubtype(ev.typeID, sc.typeID)) {
		return nil
	}
	if sc.conditionID {
		if ev.condition == nil {
			return nil
		}
		return ev.condition
	}
	return ev.fields[sc.path]
}

// eventFilter is a compiled EventFilter.
type eventFilter struct {
	selects []selectClause
	where   []whereElement // empty: every event
}

type whereElement struct {
	op       ua.FilterOperator
	operands []operand
}

// operand is a compiled FilterOperand: a literal, a field, or another
// element's result.
type operand struct {
	literal any
	field   *selectClause
	element int // >0: the index of the element (always after this one)
}

// whereOperandCounts are the operators scadad evaluates and their operand
// counts (Part 4, 7.4.3; -1: one or more).
var whereOperandCounts = map[ua.FilterOperator]int{
	ua.FilterOperatorEquals: 2, ua.FilterOperatorIsNull: 1, ua.FilterOperatorGreaterThan: 2,
	ua.FilterOperatorLessThan: 2, ua.FilterOperatorGreaterThanOrEqual: 2, ua.FilterOperatorLessThanOrEqual: 2,
	ua.FilterOperatorNot: 1, ua.FilterOperatorBetween: 3, ua.FilterOperatorInList: -1,
	ua.FilterOperatorAnd: 2, ua.FilterOperatorOr: 2, ua.FilterOperatorOfType: 1,
}

// compileEventFilter checks an EventFilter. The result's codes say what is
// wrong with each clause; the item is refused (code not OK) when no select
// clause is usable or the where clause is not.
func compileEventFilter(f *ua.EventFilter) (*eventFilter, *ua.EventFilterResult, ua.StatusCode) {
	res := &ua.EventFilterResult{SelectClauseDiagnosticInfos: []*ua.DiagnosticInfo{}, WhereClauseResult: &ua.ContentFilterResult{
		ElementResults: []*ua.ContentFilterElementResult{}, ElementDiagnosticInfos: []*ua.DiagnosticInfo{}}}
	if f == nil {
		return nil, res, ua.StatusBadEventFilterInvalid
	}
	if len(f.SelectClauses) == 0 || len(f.SelectClauses) > maxSelectClauses {
		res.SelectClauseResults = []ua.StatusCode{}
		return nil, res, ua.StatusBadEventFilterInvalid
	}
	out := &eventFilter{}
	res.SelectClauseResults = make([]ua.StatusCode, len(f.SelectClauses))
	usable := 0
	for i, op := range f.SelectClauses {
		sc, code := compileOperand(op)
		res.SelectClauseResults[i] = code
		out.selects = append(out.selects, sc)
		if code == ua.StatusOK {
			usable++
		}
	}
	code := ua.StatusOK
	if usable == 0 {
		code = ua.StatusBadEventFilterInvalid
	}
	if f.WhereClause != nil && len(f.WhereClause.Elements) > 0 {
		where, results, ok := compileWhere(f.WhereClause.Elements)
		res.WhereClauseResult.ElementResults = results
		if !ok {
			return nil, res, ua.StatusBadMonitoredItemFilterInvalid
		}
		out.where = where
	}
	if code != ua.StatusOK {
		return nil, res, code
	}
	// The result is returned only when something in it is not Good
	// (Part 4, 7.22.3); an all-Good result is left out by the caller.
	return out, res, code
}

func compileWhere(elems []*ua.ContentFilterElement) ([]whereElement, []*ua.ContentFilterElementResult, bool) {
	results := make([]*ua.ContentFilterElementResult, len(elems))
	out := make([]whereElement, len(elems))
	ok := len(elems) <= maxWhereElements
	for i, el := range elems {
		r := &ua.ContentFilterElementResult{StatusCode: ua.StatusOK, OperandStatusCodes: []ua.StatusCode{}, OperandDiagnosticInfos: []*ua.DiagnosticInfo{}}
		results[i] = r
		if !ok {
			r.StatusCode = ua.StatusBadContentFilterInvalid
			continue
		}
		if el == nil {
			r.StatusCode, ok = ua.StatusBadFilterElementInvalid, false
			continue
		}
		want, known := whereOperandCounts[el.FilterOperator]
		switch {
		case !known && el.FilterOperator <= ua.FilterOperatorBitwiseOr:
			r.StatusCode, ok = ua.StatusBadFilterOperatorUnsupported, false
			continue
		case !known:
			r.StatusCode, ok = ua.StatusBadFilterOperatorInvalid, false
			continue
		case (want > 0 && len(el.FilterOperands) != want) || (want < 0 && len(el.FilterOperands) < 2) || len(el.FilterOperands) > maxWhereElements:
			r.StatusCode, ok = ua.StatusBadFilterOperandCountMismatch, false
			continue
		}
		w := whereElement{op: el.FilterOperator}
		r.OperandStatusCodes = make([]ua.StatusCode, len(el.FilterOperands))
		for j, eo := range el.FilterOperands {
			o, code := compileWhereOperand(eo, i, len(elems))
			r.OperandStatusCodes[j] = code
			if code != ua.StatusOK {
				r.StatusCode, ok = ua.StatusBadFilterOperandInvalid, false
			}
			w.operands = append(w.operands, o)
		}
		if r.StatusCode == ua.StatusOK && el.FilterOperator == ua.FilterOperatorOfType {
			if nid, isID := w.operands[0].literal.(*ua.NodeID); !isID || nid.Namespace() != 0 {
				r.StatusCode, ok = ua.StatusBadFilterOperandInvalid, false
				r.OperandStatusCodes[0] = ua.StatusBadFilterOperandInvalid
			}
		}
		out[i] = w
	}
	return out, results, ok
}

func compileWhereOperand(eo *ua.ExtensionObject, at, count int) (operand, ua.StatusCode) {
	if eo == nil {
		return operand{}, ua.StatusBadFilterOperandInvalid
	}
	switch v := eo.Value.(type) {
	case *ua.LiteralOperand:
		if v == nil || v.Value == nil {
			return operand{}, ua.StatusBadFilterOperandInvalid
		}
		return operand{literal: v.Value.Value()}, ua.StatusOK
	case *ua.ElementOperand:
		// Only later elements: a filter cannot loop.
		if v == nil || int(v.Index) <= at || int(v.Index) >= count {
			return operand{}, ua.StatusBadFilterOperandInvalid
		}
		return operand{element: int(v.Index)}, ua.StatusOK
	case *ua.SimpleAttributeOperand:
		sc, code := compileOperand(v)
		if code != ua.StatusOK {
			return operand{}, code
		}
		return operand{field: &sc}, ua.StatusOK
	}
	return operand{}, ua.StatusBadFilterOperandInvalid
}

// matches evaluates the where clause on ev (Part 4, 7.4.3); a comparison
// with a null or a value of another kind is false.
func (f *eventFilter) matches(ev *event) bool {
	if len(f.where) == 0 {
		return true
	}
	return truth(f.eval(ev, 0))
}

func truth(v any) bool {
	b, ok := v.(bool)
	return ok && b
}

func (f *eventFilter) operandValue(ev *event, o operand) any {
	switch {
	case o.element > 0:
		return f.eval(ev, o.element)
	case o.field != nil:
		return o.field.value(ev)
	}
	return o.literal
}

func (f *eventFilter) eval(ev *event, i int) any {
	el := f.where[i]
	arg := func(j int) any { return f.operandValue(ev, el.operands[j]) }
	switch el.op {
	case ua.FilterOperatorAnd:
		return truth(arg(0)) && truth(arg(1))
	case ua.FilterOperatorOr:
		return truth(arg(0)) || truth(arg(1))
	case ua.FilterOperatorNot:
		b, ok := arg(0).(bool)
		return ok && !b
	case ua.FilterOperatorIsNull:
		return arg(0) == nil
	case ua.FilterOperatorOfType:
		nid, _ := el.operands[0].literal.(*ua.NodeID)
		return nid != nil && isSubtype(ev.typeID, nid.IntID())
	case ua.FilterOperatorEquals:
		c, ok := compare(arg(0), arg(1))
		return ok && c == 0
	case ua.FilterOperatorGreaterThan:
		c, ok := compare(arg(0), arg(1))
		return ok && c > 0
	case ua.FilterOperatorLessThan:
		c, ok := compare(arg(0), arg(1))
		return ok && c < 0
	case ua.FilterOperatorGreaterThanOrEqual:
		c, ok := compare(arg(0), arg(1))
		return ok && c >= 0
	case ua.FilterOperatorLessThanOrEqual:
		c, ok := compare(arg(0), arg(1))
		return ok && c <= 0
	case ua.FilterOperatorBetween:
		x := arg(0)
		lo, okLo := compare(x, arg(1))
		hi, okHi := compare(x, arg(2))
		return okLo && okHi && lo >= 0 && hi <= 0
	case ua.FilterOperatorInList:
		x := arg(0)
		for j := 1; j < len(el.operands); j++ {
			if c, ok := compare(x, arg(j)); ok && c == 0 {
				return true
			}
		}
		return false
	}
	return nil
}

// compare orders two values of the same kind: numbers (any numeric
// type), strings, localized texts (by text), booleans, times, node ids
// and byte strings (equality only).
func compare(a, b any) (int, bool) {
	if a == nil || b == nil {
		return 0, false
	}
	if x, ok := numericValue(a); ok {
		y, ok := numericValue(b)
		if !ok {
			return 0, false
		}
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	}
	text := func(v any) (string, bool) {
		switch s := v.(type) {
		case string:
			return s, true
		case *ua.LocalizedText:
			if s == nil {
				return "", false
			}
			return s.Text, true
		}
		return "", false
	}
	if x, ok := text(a); ok {
		y, ok := text(b)
		return strings.Compare(x, y), ok
	}
	switch x := a.(type) {
	case bool:
		y, ok := b.(bool)
		if !ok {
			return 0, false
		}
		if x == y {
			return 0, true
		}
		if !x {
			return -1, true
		}
		return 1, true
	case time.Time:
		y, ok := b.(time.Time)
		return x.Compare(y), ok
	case *ua.NodeID:
		y, ok := b.(*ua.NodeID)
		if !ok || x == nil || y == nil {
			return 0, false
		}
		if x.String() == y.String() {
			return 0, true
		}
		return 1, true // unequal; node ids have no order
	case []byte:
		y, ok := b.([]byte)
		if !ok {
			return 0, false
		}
		if bytes.Equal(x, y) {
			return 0, true
		}
		return 1, true
	}
	return 0, false
}

// fieldList is what an event item reports of ev: one Variant per select
// clause, null where the clause is invalid or the event has no such field.
func (f *eventFilter) fieldList(handle uint32, ev *event) *ua.EventFieldList {
	out := &ua.EventFieldList{ClientHandle: handle, EventFields: make([]*ua.Variant, len(f.selects))}
	for i, sc := range f.selects {
		out.EventFields[i] = variantOf(sc.value(ev))
	}
	return out
}

// variantOf is v as a Variant; a null Variant for nil or what has none.
func variantOf(v any) *ua.Variant {
	if v == nil {
		return &ua.Variant{}
	}
	out, err := ua.NewVariant(v)
	if err != nil {
		return &ua.Variant{}
	}
	return out
}
