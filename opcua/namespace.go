package opcua

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
)

// siteNamespace is our own implementation of server.NameSpace. The library's
// NodeNameSpace cannot remove nodes, takes its read lock recursively inside
// Browse (a deadlock as soon as a writer waits in between), and lets a
// client write replace a node's value source; this one holds plain data
// under one lock and answers every lookup with a fresh copy.
type siteNamespace struct {
	uri      string
	siteName string
	clock    Clock

	// idx is set by server.AddNamespace before Start, and again, to the
	// same index, when a restarted library's server adds the namespace.
	idx uint16
	// refTypes is namespace 0's reference type hierarchy, set before
	// Start (Server.newLibrary).
	refTypes refHierarchy

	mu        sync.RWMutex
	instances map[string]*instanceNode // by instance name
	vars      map[string]*varNode      // by "<instance>.<attribute>"
	// version is the model's Version, published when this server first
	// applied it (the namespace's metadata, nsmetadata.go).
	version   string
	published time.Time
}

type instanceNode struct {
	name  string
	attrs []string // attribute names in model order
}

type varNode struct {
	instance string
	name     string
	typ      DataType
	writable bool
	meta     attrMeta

	value      *ua.Variant
	status     ua.StatusCode
	sourceTime time.Time
	serverTime time.Time
}

// attrMeta is what an attribute's config says beyond its type and
// writability: served as attributes, or checked on writes.
type attrMeta struct {
	description    string
	allowNonFinite bool
	units          string  // "": no EngineeringUnits property
	hasRange       bool    // an EURange property, low to high
	low, high      float64 // (comparable: apply compares metas)
}

func metaOf(a Attribute) attrMeta {
	m := attrMeta{description: a.Description, allowNonFinite: a.AllowNonFinite, units: a.Units}
	if r := a.EURange; r != nil {
		m.hasRange, m.low, m.high = true, r.Low, r.High
	}
	return m
}

// The properties of an analog variable (Part 8, 5.3.2): node ids
// "<instance>.<attribute>/<property>" (Model.validate refuses a '/' in any name, so
// no attribute can take one), BrowseNames in namespace 0.
const (
	propEngineeringUnits = "EngineeringUnits"
	propEURange          = "EURange"
)

// unitsNamespace is the namespace of EUInformation unit ids (Part 8,
// 5.6.3: UNECE Recommendation 20); a configured units text has no unit id
// (-1).
const unitsNamespace = "http://www.opcfoundation.org/UA/units/un/cefact"

// properties lists the properties v has.
func (v *varNode) properties() []string {
	var out []string
	if v.meta.units != "" {
		out = append(out, propEngineeringUnits)
	}
	if v.meta.hasRange {
		out = append(out, propEURange)
	}
	return out
}

// typeDefinition is v's variable type: AnalogItemType with an EURange
// (mandatory there), BaseAnalogType with units alone.
func (v *varNode) typeDefinition() (uint32, string) {
	switch {
	case v.meta.hasRange:
		return id.AnalogItemType, "AnalogItemType"
	case v.meta.units != "":
		return id.BaseAnalogType, "BaseAnalogType"
	}
	return id.BaseDataVariableType, "BaseDataVariableType"
}

// propertyValue is the value of v's property name.
func (v *varNode) propertyValue(name string) (any, uint32) {
	if name == propEngineeringUnits {
		return ua.NewExtensionObject(&ua.EUInformation{NamespaceURI: unitsNamespace, UnitID: -1,
			DisplayName: localized(v.meta.units), Description: localized(v.meta.units)}), id.EUInformation
	}
	return ua.NewExtensionObject(&ua.Range{Low: v.meta.low, High: v.meta.high}), id.Range
}

// propOf splits a property node id's string into its variable's key and
// the property's name; ok only for a property the variable has.
func (ns *siteNamespace) propLocked(sid string) (*varNode, string, bool) {
	i := strings.LastIndexByte(sid, '/')
	if i < 0 {
		return nil, "", false
	}
	v, ok := ns.vars[sid[:i]]
	if !ok {
		return nil, "", false
	}
	name := sid[i+1:]
	for _, p := range v.properties() {
		if p == name {
			return v, name, true
		}
	}
	return nil, "", false
}

func (ns *siteNamespace) propID(instance, attr, prop string) *ua.NodeID {
	return ua.NewStringNodeID(ns.idx, instance+"."+attr+"/"+prop)
}

// EURange returns the EURange of the variable nid, if it has one.
func (ns *siteNamespace) EURange(nid *ua.NodeID) (low, high float64, ok bool) {
	v, found := ns.lookupVar(nid)
	if !found || !v.meta.hasRange {
		return 0, 0, false
	}
	return v.meta.low, v.meta.high, true
}

// ModelDiff counts what ApplyModel changed.
type ModelDiff struct {
	AddedInstances, RemovedInstances   int
	AddedAttributes, RemovedAttributes int
	ChangedAttributes                  int
	KeptAttributes                     int
}

func newSiteNamespace(uri, siteName string, clock Clock) *siteNamespace {
	return &siteNamespace{
		uri:       uri,
		siteName:  siteName,
		clock:     clock,
		instances: make(map[string]*instanceNode),
		vars:      make(map[string]*varNode),
	}
}

// metadata is what the namespace's NamespaceMetadata object says of it.
func (ns *siteNamespace) metadata() namespaceMeta {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return namespaceMeta{idx: ns.idx, uri: ns.uri, version: ns.version, published: ns.published}
}

func (ns *siteNamespace) rootID() *ua.NodeID { return ua.NewNumericNodeID(ns.idx, id.ObjectsFolder) }

func (ns *siteNamespace) folderID(instance string) *ua.NodeID {
	return ua.NewStringNodeID(ns.idx, instance)
}

func (ns *siteNamespace) varID(instance, attr string) *ua.NodeID {
	return ua.NewStringNodeID(ns.idx, instance+"."+attr)
}

// apply moves the address space to m by difference: nodes present in both
// keep their value and quality; a node whose type changed restarts as
// waiting-for-data. It returns the diff and the ids whose subscribers must
// hear about it (removed and retyped variables).
func (ns *siteNamespace) apply(m Model) (ModelDiff, []*ua.NodeID) {
	var d ModelDiff
	var touched []*ua.NodeID
	now := ns.clock.Now()

	ns.mu.Lock()
	defer ns.mu.Unlock()
	if m.Version != ns.version || ns.published.IsZero() {
		ns.version, ns.published = m.Version, now
	}

	wantInst := make(map[string]bool, len(m.Instances))
	wantVar := make(map[string]bool)
	for _, in := range m.Instances {
		wantInst[in.Name] = true
		inst, ok := ns.instances[in.Name]
		if !ok {
			inst = &instanceNode{name: in.Name}
			ns.instances[in.Name] = inst
			d.AddedInstances++
		}
		inst.attrs = inst.attrs[:0]
		for _, a := range in.Attributes {
			key := in.Name + "." + a.Name
			wantVar[key] = true
			inst.attrs = append(inst.attrs, a.Name)
			v, ok := ns.vars[key]
			switch {
			case !ok:
				ns.vars[key] = &varNode{
					instance: in.Name, name: a.Name, typ: a.Type, writable: a.Writable, meta: metaOf(a),
					status: ua.StatusBadWaitingForInitialData, serverTime: now,
				}
				d.AddedAttributes++
			case v.typ != a.Type:
				v.typ, v.writable, v.meta = a.Type, a.Writable, metaOf(a)
				v.value, v.status, v.sourceTime, v.serverTime = nil, ua.StatusBadWaitingForInitialData, time.Time{}, now
				d.ChangedAttributes++
				touched = append(touched, ns.varID(in.Name, a.Name))
			case v.writable != a.Writable || v.meta != metaOf(a):
				v.writable, v.meta = a.Writable, metaOf(a)
				d.ChangedAttributes++
			default:
				d.KeptAttributes++
			}
		}
	}
	for key, v := range ns.vars {
		if !wantVar[key] {
			delete(ns.vars, key)
			d.RemovedAttributes++
			touched = append(touched, ns.varID(v.instance, v.name))
		}
	}
	for name := range ns.instances {
		if !wantInst[name] {
			delete(ns.instances, name)
			d.RemovedInstances++
		}
	}
	return d, touched
}

// update stores a feed value. It reports false when the variable does not exist.
func (ns *siteNamespace) update(instance, attr string, conv func(DataType) (*ua.Variant, error), status ua.StatusCode, sourceTime time.Time) (bool, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	v, ok := ns.vars[instance+"."+attr]
	if !ok {
		return false, nil
	}
	v.serverTime = ns.clock.Now()
	v.sourceTime = sourceTime
	val, err := conv(v.typ)
	if err != nil {
		// Keep the last value but say it can no longer be trusted.
		v.status = ua.StatusBadTypeMismatch
		return true, err
	}
	v.value = val
	v.status = status
	return true, nil
}

// lookupVar returns a copy of the variable named by nid.
func (ns *siteNamespace) lookupVar(nid *ua.NodeID) (varNode, bool) {
	if nid == nil || nid.Namespace() != ns.idx || nid.Type() != ua.NodeIDTypeString {
		return varNode{}, false
	}
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	v, ok := ns.vars[nid.StringID()]
	if !ok {
		return varNode{}, false
	}
	return *v, true
}

// kind classifies a node id of this namespace.
type nodeKind int

const (
	kindNone nodeKind = iota
	kindRoot
	kindFolder
	kindVar
	kindProp // a property of a variable (EngineeringUnits, EURange)
)

func (ns *siteNamespace) kindLocked(nid *ua.NodeID) nodeKind {
	if nid == nil || nid.Namespace() != ns.idx {
		return kindNone
	}
	if nid.Type() == ua.NodeIDTypeNumeric || nid.Type() == ua.NodeIDTypeTwoByte || nid.Type() == ua.NodeIDTypeFourByte {
		if nid.IntID() == id.ObjectsFolder {
			return kindRoot
		}
		return kindNone
	}
	if nid.Type() != ua.NodeIDTypeString {
		return kindNone
	}
	if _, ok := ns.instances[nid.StringID()]; ok {
		return kindFolder
	}
	if _, ok := ns.vars[nid.StringID()]; ok {
		return kindVar
	}
	if _, _, ok := ns.propLocked(nid.StringID()); ok {
		return kindProp
	}
	return kindNone
}

// --- server.NameSpace ---

func (ns *siteNamespace) Name() string { return ns.uri }
func (ns *siteNamespace) ID() uint16   { return ns.idx }

// SetID records the namespace's index. A restarted library's server sets
// the index it already has while requests read it: only a change writes.
func (ns *siteNamespace) SetID(idx uint16) {
	if ns.idx != idx {
		ns.idx = idx
	}
}
func (ns *siteNamespace) Root() *server.Node { return ns.Objects() }

// AddNode is not supported: the address space follows the model only.
func (ns *siteNamespace) AddNode(n *server.Node) *server.Node { return n }

// Objects returns the site folder that ns=0 Objects organizes.
func (ns *siteNamespace) Objects() *server.Node {
	return server.NewNode(ns.rootID(), server.Attributes{
		ua.AttributeIDNodeClass:   server.DataValueFromValue(uint32(ua.NodeClassObject)),
		ua.AttributeIDBrowseName:  server.DataValueFromValue(&ua.QualifiedName{NamespaceIndex: ns.idx, Name: ns.siteName}),
		ua.AttributeIDDisplayName: server.DataValueFromValue(localized(ns.siteName)),
		ua.AttributeIDDataType:    server.DataValueFromValue(ua.NewNumericExpandedNodeID(0, id.FolderType)),
	}, nil, nil)
}

// Node gives the library a read-only view of one of our nodes. The library
// uses it only to look up type definitions while browsing namespace 0.
func (ns *siteNamespace) Node(nid *ua.NodeID) *server.Node {
	ns.mu.RLock()
	k := ns.kindLocked(nid)
	ns.mu.RUnlock()
	switch k {
	case kindRoot:
		return ns.Objects()
	case kindFolder, kindVar, kindProp:
		class, typ := ua.NodeClassObject, id.FolderType
		switch k {
		case kindVar:
			class, typ = ua.NodeClassVariable, id.BaseDataVariableType
		case kindProp:
			class, typ = ua.NodeClassVariable, id.PropertyType
		}
		name := nid.StringID()
		return server.NewNode(nid, server.Attributes{
			ua.AttributeIDNodeClass:   server.DataValueFromValue(uint32(class)),
			ua.AttributeIDBrowseName:  server.DataValueFromValue(&ua.QualifiedName{NamespaceIndex: ns.idx, Name: name}),
			ua.AttributeIDDisplayName: server.DataValueFromValue(localized(name)),
			ua.AttributeIDDataType:    server.DataValueFromValue(ua.NewNumericExpandedNodeID(0, uint32(typ))),
		}, nil, nil)
	default:
		return nil
	}
}

// SetAttribute is never reached through our Write handler; it refuses so a
// stray caller cannot replace a value either.
func (ns *siteNamespace) SetAttribute(*ua.NodeID, ua.AttributeID, *ua.DataValue) ua.StatusCode {
	return ua.StatusBadNotWritable
}

func localized(s string) *ua.LocalizedText {
	lt := &ua.LocalizedText{Text: s}
	lt.UpdateMask()
	return lt
}

func statusValue(code ua.StatusCode, now time.Time) *ua.DataValue {
	return &ua.DataValue{
		EncodingMask:    ua.DataValueServerTimestamp | ua.DataValueStatusCode,
		ServerTimestamp: now,
		Status:          code,
	}
}

func plainValue(v any, now time.Time) *ua.DataValue {
	variant, err := ua.NewVariant(v)
	if err != nil {
		return statusValue(ua.StatusBadInternalError, now)
	}
	return &ua.DataValue{
		EncodingMask:    ua.DataValueValue | ua.DataValueServerTimestamp,
		Value:           variant,
		ServerTimestamp: now,
	}
}

const (
	accessRead      = byte(ua.AccessLevelTypeCurrentRead)
	accessReadWrite = byte(ua.AccessLevelTypeCurrentRead | ua.AccessLevelTypeCurrentWrite)
)

// Attribute answers a read of one attribute of one of our nodes.
func (ns *siteNamespace) Attribute(nid *ua.NodeID, attr ua.AttributeID) *ua.DataValue {
	now := ns.clock.Now()
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	k := ns.kindLocked(nid)
	if k == kindNone {
		return statusValue(ua.StatusBadNodeIDUnknown, now)
	}
	var (
		class ua.NodeClass = ua.NodeClassObject
		name               = ns.siteName
		v     *varNode
	)
	switch k {
	case kindFolder:
		name = nid.StringID()
	case kindVar:
		v = ns.vars[nid.StringID()]
		class, name = ua.NodeClassVariable, v.name
	case kindProp:
		pv, prop, _ := ns.propLocked(nid.StringID())
		return propertyAttribute(pv, prop, nid, attr, now)
	}
	switch attr {
	case ua.AttributeIDNodeID:
		return plainValue(nid, now)
	case ua.AttributeIDNodeClass:
		return plainValue(int32(class), now)
	case ua.AttributeIDBrowseName:
		return plainValue(&ua.QualifiedName{NamespaceIndex: ns.idx, Name: name}, now)
	case ua.AttributeIDDisplayName:
		return plainValue(localized(name), now)
	case ua.AttributeIDDescription:
		if v != nil {
			return plainValue(localized(v.meta.description), now)
		}
		return plainValue(localized(""), now)
	case ua.AttributeIDWriteMask, ua.AttributeIDUserWriteMask:
		return plainValue(uint32(0), now)
	}
	if v == nil {
		if attr == ua.AttributeIDEventNotifier {
			// An instance's folder reports its conditions' events.
			if k == kindFolder {
				return plainValue(byte(ua.EventNotifierTypeSubscribeToEvents), now)
			}
			return plainValue(byte(0), now)
		}
		return statusValue(ua.StatusBadAttributeIDInvalid, now)
	}
	switch attr {
	case ua.AttributeIDValue:
		dv := &ua.DataValue{
			EncodingMask:    ua.DataValueServerTimestamp | ua.DataValueStatusCode,
			ServerTimestamp: v.serverTime,
			Status:          v.status,
		}
		if v.value != nil {
			dv.EncodingMask |= ua.DataValueValue
			dv.Value = v.value
		}
		if !v.sourceTime.IsZero() {
			dv.EncodingMask |= ua.DataValueSourceTimestamp
			dv.SourceTimestamp = v.sourceTime
		}
		return dv
	case ua.AttributeIDDataType:
		return plainValue(ua.NewNumericNodeID(0, uint32(v.typ.typeID())), now)
	case ua.AttributeIDValueRank:
		return plainValue(int32(-1), now)
	case ua.AttributeIDArrayDimensions:
		return plainValue([]uint32{}, now)
	case ua.AttributeIDAccessLevel, ua.AttributeIDUserAccessLevel:
		if v.writable {
			return plainValue(accessReadWrite, now)
		}
		return plainValue(accessRead, now)
	case ua.AttributeIDMinimumSamplingInterval:
		return plainValue(float64(0), now)
	case ua.AttributeIDHistorizing:
		return plainValue(false, now)
	default:
		return statusValue(ua.StatusBadAttributeIDInvalid, now)
	}
}

// propertyAttribute answers a read of one attribute of v's property
// prop.
func propertyAttribute(v *varNode, prop string, nid *ua.NodeID, attr ua.AttributeID, now time.Time) *ua.DataValue {
	value, dataType := v.propertyValue(prop)
	return readOnlyProperty(nid, attr, prop, value, dataType, -1, now)
}

// readObject answers a Read of the attributes of an Object node this
// package serves itself (a condition, a namespace's metadata): no events
// of its own, nothing writable.
func readObject(nid *ua.NodeID, attr ua.AttributeID, browseName *ua.QualifiedName, displayName, description string, now time.Time) *ua.DataValue {
	switch attr {
	case ua.AttributeIDNodeID:
		return plainValue(nid, now)
	case ua.AttributeIDNodeClass:
		return plainValue(int32(ua.NodeClassObject), now)
	case ua.AttributeIDBrowseName:
		return plainValue(browseName, now)
	case ua.AttributeIDDisplayName:
		return plainValue(localized(displayName), now)
	case ua.AttributeIDDescription:
		return plainValue(localized(description), now)
	case ua.AttributeIDWriteMask, ua.AttributeIDUserWriteMask:
		return plainValue(uint32(0), now)
	case ua.AttributeIDEventNotifier:
		return plainValue(byte(0), now)
	}
	return statusValue(ua.StatusBadAttributeIDInvalid, now)
}

// readOnlyProperty answers a read of one attribute of a read-only
// PropertyType variable whose BrowseName is name in namespace 0, whose
// value is value, of dataType and rank (-1 scalar, 1 an array).
func readOnlyProperty(nid *ua.NodeID, attr ua.AttributeID, name string, value any, dataType uint32, rank int32, now time.Time) *ua.DataValue {
	switch attr {
	case ua.AttributeIDNodeID:
		return plainValue(nid, now)
	case ua.AttributeIDNodeClass:
		return plainValue(int32(ua.NodeClassVariable), now)
	case ua.AttributeIDBrowseName:
		return plainValue(&ua.QualifiedName{Name: name}, now)
	case ua.AttributeIDDisplayName:
		return plainValue(localized(name), now)
	case ua.AttributeIDDescription:
		return plainValue(localized(""), now)
	case ua.AttributeIDWriteMask, ua.AttributeIDUserWriteMask:
		return plainValue(uint32(0), now)
	case ua.AttributeIDValue:
		return plainValue(value, now)
	case ua.AttributeIDDataType:
		return plainValue(ua.NewNumericNodeID(0, dataType), now)
	case ua.AttributeIDValueRank:
		return plainValue(rank, now)
	case ua.AttributeIDArrayDimensions:
		if rank == 1 {
			return plainValue([]uint32{0}, now) // one dimension of any length
		}
		return plainValue([]uint32{}, now)
	case ua.AttributeIDAccessLevel, ua.AttributeIDUserAccessLevel:
		return plainValue(accessRead, now)
	case ua.AttributeIDMinimumSamplingInterval:
		return plainValue(float64(0), now)
	case ua.AttributeIDHistorizing:
		return plainValue(false, now)
	}
	return statusValue(ua.StatusBadAttributeIDInvalid, now)
}

type ref struct {
	refType  uint32
	forward  bool
	target   *ua.NodeID
	name     string
	class    ua.NodeClass
	typeDef  uint32
	targetNS uint16
}

// Browse lists the references of one of our nodes that match bd.
func (ns *siteNamespace) Browse(bd *ua.BrowseDescription) *ua.BrowseResult {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	k := ns.kindLocked(bd.NodeID)
	var refs []ref
	switch k {
	case kindNone:
		return &ua.BrowseResult{StatusCode: ua.StatusBadNodeIDUnknown}
	case kindRoot:
		refs = append(refs,
			ref{refType: id.HasTypeDefinition, forward: true, target: ua.NewNumericNodeID(0, id.FolderType), name: "FolderType", class: ua.NodeClassObjectType},
			ref{refType: id.Organizes, forward: false, target: ua.NewNumericNodeID(0, id.ObjectsFolder), name: "Objects", class: ua.NodeClassObject, typeDef: id.FolderType})
		names := make([]string, 0, len(ns.instances))
		for n := range ns.instances {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			refs = append(refs, ref{refType: id.Organizes, forward: true, target: ns.folderID(n), name: n, class: ua.NodeClassObject, typeDef: id.FolderType, targetNS: ns.idx})
		}
	case kindFolder:
		inst := ns.instances[bd.NodeID.StringID()]
		refs = append(refs,
			ref{refType: id.HasTypeDefinition, forward: true, target: ua.NewNumericNodeID(0, id.FolderType), name: "FolderType", class: ua.NodeClassObjectType},
			ref{refType: id.Organizes, forward: false, target: ns.rootID(), name: ns.siteName, class: ua.NodeClassObject, typeDef: id.FolderType, targetNS: ns.idx})
		for _, a := range inst.attrs {
			refs = append(refs, ref{refType: id.HasComponent, forward: true, target: ns.varID(inst.name, a), name: a, class: ua.NodeClassVariable, typeDef: id.BaseDataVariableType, targetNS: ns.idx})
		}
	case kindVar:
		v := ns.vars[bd.NodeID.StringID()]
		typ, typName := v.typeDefinition()
		refs = append(refs,
			ref{refType: id.HasTypeDefinition, forward: true, target: ua.NewNumericNodeID(0, typ), name: typName, class: ua.NodeClassVariableType},
			ref{refType: id.HasComponent, forward: false, target: ns.folderID(v.instance), name: v.instance, class: ua.NodeClassObject, typeDef: id.FolderType, targetNS: ns.idx})
		for _, p := range v.properties() {
			refs = append(refs, ref{refType: id.HasProperty, forward: true, target: ns.propID(v.instance, v.name, p), name: p, class: ua.NodeClassVariable, typeDef: id.PropertyType})
		}
	case kindProp:
		v, _, _ := ns.propLocked(bd.NodeID.StringID())
		typ, _ := v.typeDefinition()
		refs = append(refs,
			ref{refType: id.HasTypeDefinition, forward: true, target: ua.NewNumericNodeID(0, id.PropertyType), name: "PropertyType", class: ua.NodeClassVariableType},
			ref{refType: id.HasProperty, forward: false, target: ns.varID(v.instance, v.name), name: v.name, class: ua.NodeClassVariable, typeDef: typ, targetNS: ns.idx})
	}
	return &ua.BrowseResult{StatusCode: ua.StatusGood, References: describeRefs(bd, refs, ns.refTypes)}
}

func directionMatches(d ua.BrowseDirection, forward bool) bool {
	switch d {
	case ua.BrowseDirectionBoth:
		return true
	case ua.BrowseDirectionForward:
		return forward
	case ua.BrowseDirectionInverse:
		return !forward
	default:
		return false
	}
}
