package opcua

import (
	"slices"
	"strings"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// The address space of conditions (Part 9): each condition is an Object
// of ExclusiveLimitAlarmType or OffNormalAlarmType, a component of its
// source's folder (HasComponent and HasCondition; of the site folder when
// its source is no instance), with the standard fields as variables. The
// Server object and every instance folder are event notifiers
// (EventNotifier SubscribeToEvents, HasNotifier from the Server object).

// conditionField is one browsable variable of a condition: a property of
// the condition, or a component (a TwoStateVariable or ConditionVariable)
// whose Id is a property of it.
type conditionField struct {
	path      string
	component bool
	typeDef   uint32
}

var conditionFieldList = []conditionField{
	{"EventId", false, id.PropertyType}, {"EventType", false, id.PropertyType},
	{"SourceNode", false, id.PropertyType}, {"SourceName", false, id.PropertyType},
	{"Time", false, id.PropertyType}, {"ReceiveTime", false, id.PropertyType},
	{"Message", false, id.PropertyType}, {"Severity", false, id.PropertyType},
	{"ConditionClassId", false, id.PropertyType}, {"ConditionClassName", false, id.PropertyType},
	{"ConditionName", false, id.PropertyType}, {"BranchId", false, id.PropertyType},
	{"Retain", false, id.PropertyType}, {"ClientUserId", false, id.PropertyType},
	{"SuppressedOrShelved", false, id.PropertyType}, {"InputNode", false, id.PropertyType},
	{"EnabledState", true, id.TwoStateVariableType}, {"EnabledState/Id", false, id.PropertyType},
	{"Quality", true, id.ConditionVariableType}, {"LastSeverity", true, id.ConditionVariableType},
	{"Comment", true, id.ConditionVariableType},
	{"AckedState", true, id.TwoStateVariableType}, {"AckedState/Id", false, id.PropertyType},
	{"ConfirmedState", true, id.TwoStateVariableType}, {"ConfirmedState/Id", false, id.PropertyType},
	{"ActiveState", true, id.TwoStateVariableType}, {"ActiveState/Id", false, id.PropertyType},
}

func findField(path string) (conditionField, bool) {
	for _, f := range conditionFieldList {
		if f.path == path {
			return f, true
		}
	}
	return conditionField{}, false
}

// conditionNode splits a node id of this namespace naming a condition or
// one of its fields.
func (s *Server) conditionNode(nid *ua.NodeID) (e conditionEntry, field conditionField, isField, ok bool) {
	if nid == nil || nid.Namespace() != s.ns.idx || nid.Type() != ua.NodeIDTypeString {
		return conditionEntry{}, conditionField{}, false, false
	}
	sid, found := strings.CutPrefix(nid.StringID(), conditionPrefix)
	if !found {
		return conditionEntry{}, conditionField{}, false, false
	}
	if e, ok := s.conds.get(sid); ok {
		return e, conditionField{}, false, true
	}
	i := strings.LastIndex(sid, fieldSep)
	if i < 0 {
		return conditionEntry{}, conditionField{}, false, false
	}
	f, known := findField(sid[i+1:])
	e, ok = s.conds.get(sid[:i])
	return e, f, true, ok && known
}

func (s *Server) fieldID(alarm, path string) *ua.NodeID {
	return ua.NewStringNodeID(s.ns.idx, conditionPrefix+alarm+fieldSep+path)
}

// notifierOf says whether nid is an event notifier: the Server object
// (every event) or an instance's folder (its conditions' events).
func (s *Server) notifierOf(nid *ua.NodeID) (source string, all, ok bool) {
	if nid == nil {
		return "", false, false
	}
	if nid.Namespace() == 0 && nid.Type() != ua.NodeIDTypeString && nid.IntID() == id.Server {
		return "", true, true
	}
	if nid.Namespace() != s.ns.idx {
		return "", false, false
	}
	s.ns.mu.RLock()
	defer s.ns.mu.RUnlock()
	if s.ns.kindLocked(nid) == kindFolder {
		return nid.StringID(), false, true
	}
	return "", false, false
}

// readCondition answers a read of a condition or a condition field, and
// of the Server object's EventNotifier (the library imports none); ok
// false leaves the node to the other readers.
func (s *Server) readCondition(rv *ua.ReadValueID, now time.Time) (*ua.DataValue, bool) {
	if rv.AttributeID == ua.AttributeIDEventNotifier && isNS0(rv.NodeID, id.Server) {
		return plainValue(byte(ua.EventNotifierTypeSubscribeToEvents), now), true
	}
	e, f, isField, ok := s.conditionNode(rv.NodeID)
	if !ok {
		return nil, false
	}
	if !isField {
		return readObject(rv.NodeID, rv.AttributeID, &ua.QualifiedName{NamespaceIndex: s.ns.idx, Name: e.c.ID}, e.c.Name, e.c.Message, now), true
	}
	name := f.path[strings.LastIndexByte(f.path, '/')+1:]
	value := s.ns.conditionFields(e)[f.path]
	if rv.AttributeID == ua.AttributeIDValue {
		// A field's value is as of the transition this node received.
		return &ua.DataValue{EncodingMask: ua.DataValueValue | ua.DataValueServerTimestamp | ua.DataValueSourceTimestamp,
			Value: variantOf(value), ServerTimestamp: now, SourceTimestamp: e.received}, true
	}
	return readOnlyProperty(rv.NodeID, rv.AttributeID, name, value, fieldDataType(f.path, value), -1, now), true
}

// fieldDataType is a field's DataType: its built-in type, UtcTime for the
// times.
func fieldDataType(path string, value any) uint32 {
	if path == "Time" || path == "ReceiveTime" {
		return id.UtcTime
	}
	return uint32(variantOf(value).Type())
}

// browseWithConditions browses bd: a condition or one of its fields
// here, anything else as browseOne does, with the references to
// conditions and notifiers added to the Server object, the site folder and
// the instance folders.
func (s *Server) browseWithConditions(bd *ua.BrowseDescription) *ua.BrowseResult {
	if bd == nil || bd.NodeID == nil || bd.ReferenceTypeID == nil {
		return s.browseOne(bd)
	}
	e, f, isField, ok := s.conditionNode(bd.NodeID)
	if ok {
		return &ua.BrowseResult{StatusCode: ua.StatusGood, References: describeRefs(bd, s.conditionRefs(e, f, isField), s.refTypes)}
	}
	res := s.browseOne(bd)
	if res == nil || res.StatusCode != ua.StatusGood {
		return res
	}
	extra := s.notifierRefs(bd.NodeID)
	if len(extra) > 0 {
		res.References = append(res.References, describeRefs(bd, extra, s.refTypes)...)
	}
	return res
}

// conditionRefs are the references of a condition or of one of its fields.
func (s *Server) conditionRefs(e conditionEntry, f conditionField, isField bool) []ref {
	c := e.c
	if !isField {
		parent, parentName, parentNS := s.ns.rootID(), s.ns.siteName, s.ns.idx
		if _, _, isInstance := s.notifierOf(s.ns.folderID(c.Source)); isInstance {
			parent, parentName = s.ns.folderID(c.Source), c.Source
		}
		refs := []ref{
			{refType: id.HasTypeDefinition, forward: true, target: ua.NewNumericNodeID(0, conditionType(c)), name: conditionTypeName(c), class: ua.NodeClassObjectType},
			{refType: id.HasComponent, forward: false, target: parent, name: parentName, class: ua.NodeClassObject, typeDef: id.FolderType, targetNS: parentNS},
			{refType: id.HasCondition, forward: false, target: parent, name: parentName, class: ua.NodeClassObject, typeDef: id.FolderType, targetNS: parentNS},
		}
		for _, fl := range conditionFieldList {
			if strings.Contains(fl.path, "/") {
				continue
			}
			rt := uint32(id.HasProperty)
			if fl.component {
				rt = id.HasComponent
			}
			refs = append(refs, ref{refType: rt, forward: true, target: s.fieldID(c.ID, fl.path), name: fl.path, class: ua.NodeClassVariable, typeDef: fl.typeDef})
		}
		return refs
	}
	refs := []ref{{refType: id.HasTypeDefinition, forward: true, target: ua.NewNumericNodeID(0, f.typeDef), name: typeDefName(f.typeDef), class: ua.NodeClassVariableType}}
	parentRef := uint32(id.HasProperty)
	if f.component {
		parentRef = id.HasComponent
	}
	if i := strings.LastIndexByte(f.path, '/'); i >= 0 {
		refs = append(refs, ref{refType: parentRef, forward: false, target: s.fieldID(c.ID, f.path[:i]), name: f.path[:i], class: ua.NodeClassVariable, typeDef: id.TwoStateVariableType})
	} else {
		refs = append(refs, ref{refType: parentRef, forward: false, target: s.ns.conditionID(c.ID), name: c.ID, class: ua.NodeClassObject, typeDef: conditionType(c), targetNS: s.ns.idx})
	}
	for _, fl := range conditionFieldList {
		if strings.HasPrefix(fl.path, f.path+"/") {
			refs = append(refs, ref{refType: id.HasProperty, forward: true, target: s.fieldID(c.ID, fl.path), name: fl.path[len(f.path)+1:], class: ua.NodeClassVariable, typeDef: id.PropertyType})
		}
	}
	return refs
}

func typeDefName(t uint32) string {
	switch t {
	case id.TwoStateVariableType:
		return "TwoStateVariableType"
	case id.ConditionVariableType:
		return "ConditionVariableType"
	}
	return "PropertyType"
}

// notifierRefs are the references the Server object (HasNotifier to every
// instance folder), the site folder (its conditions whose source is no
// instance) and an instance folder (HasNotifier from the Server object,
// its conditions) gain.
func (s *Server) notifierRefs(nid *ua.NodeID) []ref {
	var refs []ref
	condRefs := func(source string) {
		for _, e := range s.conds.ofSource(source) {
			for _, rt := range []uint32{id.HasComponent, id.HasCondition} {
				refs = append(refs, ref{refType: rt, forward: true, target: s.ns.conditionID(e.c.ID), name: e.c.ID, class: ua.NodeClassObject, typeDef: conditionType(e.c), targetNS: s.ns.idx})
			}
		}
	}
	switch {
	case nid.Namespace() == 0 && nid.Type() != ua.NodeIDTypeString && nid.IntID() == id.Server:
		s.ns.mu.RLock()
		names := make([]string, 0, len(s.ns.instances))
		for n := range s.ns.instances {
			names = append(names, n)
		}
		s.ns.mu.RUnlock()
		slices.Sort(names)
		for _, n := range names {
			refs = append(refs, ref{refType: id.HasNotifier, forward: true, target: s.ns.folderID(n), name: n, class: ua.NodeClassObject, typeDef: id.FolderType, targetNS: s.ns.idx})
		}
	case nid.Namespace() != s.ns.idx:
	case nid.Type() != ua.NodeIDTypeString:
		if nid.IntID() == id.ObjectsFolder {
			// Conditions whose source is no instance hang under the site folder.
			for _, src := range s.conds.sources() {
				if _, _, isInstance := s.notifierOf(s.ns.folderID(src)); !isInstance {
					condRefs(src)
				}
			}
		}
	default:
		if source, _, ok := s.notifierOf(nid); ok {
			refs = append(refs, ref{refType: id.HasNotifier, forward: false, target: ua.NewNumericNodeID(0, id.Server), name: "Server", class: ua.NodeClassObject, typeDef: id.ServerType})
			condRefs(source)
		}
	}
	return refs
}

// describeRefs keeps the references bd asks for, as descriptions.
func describeRefs(bd *ua.BrowseDescription, refs []ref, types refHierarchy) []*ua.ReferenceDescription {
	out := make([]*ua.ReferenceDescription, 0, len(refs))
	for _, r := range refs {
		if !directionMatches(bd.BrowseDirection, r.forward) || !types.matches(bd.ReferenceTypeID, bd.IncludeSubtypes, r.refType) {
			continue
		}
		if bd.NodeClassMask != 0 && bd.NodeClassMask&uint32(r.class) == 0 {
			continue
		}
		rd := &ua.ReferenceDescription{
			ReferenceTypeID: ua.NewNumericNodeID(0, r.refType),
			IsForward:       r.forward,
			NodeID:          ua.NewExpandedNodeID(r.target, "", 0),
			BrowseName:      &ua.QualifiedName{NamespaceIndex: r.targetNS, Name: r.name},
			DisplayName:     localized(r.name),
			NodeClass:       r.class,
			TypeDefinition:  ua.NewTwoByteExpandedNodeID(0),
		}
		if r.typeDef != 0 {
			rd.TypeDefinition = ua.NewNumericExpandedNodeID(0, r.typeDef)
		}
		out = append(out, rd)
	}
	return out
}
