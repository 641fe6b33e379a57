package opcua

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/internal/numeric"
)

// DataType is the OPC UA built-in type of an attribute's value.
type DataType int

// The types a site attribute can carry.
const (
	TypeDouble DataType = iota
	TypeFloat
	TypeInt32
	TypeInt64
	TypeBoolean
	TypeString
	TypeDateTime
)

var dataTypeNames = map[DataType]string{
	TypeDouble:   "Double",
	TypeFloat:    "Float",
	TypeInt32:    "Int32",
	TypeInt64:    "Int64",
	TypeBoolean:  "Boolean",
	TypeString:   "String",
	TypeDateTime: "DateTime",
}

func (t DataType) String() string {
	if n, ok := dataTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("DataType(%d)", int(t))
}

// ParseDataType maps a config spelling ("Double", "int32", ...) to a DataType.
func ParseDataType(s string) (DataType, error) {
	for t, n := range dataTypeNames {
		if strings.EqualFold(n, s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown data type %q", s)
}

func (t DataType) typeID() ua.TypeID {
	switch t {
	case TypeDouble:
		return ua.TypeIDDouble
	case TypeFloat:
		return ua.TypeIDFloat
	case TypeInt32:
		return ua.TypeIDInt32
	case TypeInt64:
		return ua.TypeIDInt64
	case TypeBoolean:
		return ua.TypeIDBoolean
	case TypeString:
		return ua.TypeIDString
	case TypeDateTime:
		return ua.TypeIDDateTime
	default:
		return ua.TypeIDNull
	}
}

// Model is the site as the OPC UA server shows it: the daemon maps each
// deployed site configuration to one.
type Model struct {
	Instances []Instance
	// Version names this model (the daemon: the site config's revision);
	// it is served as the site namespace's NamespaceVersion, and the time
	// this server first applied it as its NamespacePublicationDate.
	Version string
}

// Instance becomes a folder.
type Instance struct {
	Name       string
	Attributes []Attribute
}

// Attribute becomes a variable under its instance's folder.
type Attribute struct {
	Name     string
	Type     DataType
	Writable bool
	// Description is served as the variable's Description attribute.
	Description string
	// AllowNonFinite lets writes of NaN and ±Inf through (Double and
	// Float); they are refused with BadOutOfRange otherwise.
	AllowNonFinite bool
	// Units, when set, is served as the EngineeringUnits property.
	Units string
	// EURange, when set, is served as the EURange property (the variable
	// is then an AnalogItemType) and lets clients use a percent deadband.
	EURange *Range
}

// Range is a numeric attribute's EURange, Low below High.
type Range struct{ Low, High float64 }

// validate rejects models whose node ids would be ambiguous. Instance folders
// are "ns=<site>;s=<instance>", variables "ns=<site>;s=<instance>.<attribute>",
// their properties "…/<property>" and conditions "alarm:<alarm>", so
// attribute names may not contain a dot, no name a slash, no instance name
// may begin as a condition's id does, and no folder id may equal a
// variable id. (siteconfig allows none of these characters; the model is
// checked again because the node ids depend on it.)
func (m Model) validate() error {
	folders := make(map[string]bool)
	vars := make(map[string]bool)
	for _, in := range m.Instances {
		if in.Name == "" {
			return fmt.Errorf("instance with empty name")
		}
		if strings.Contains(in.Name, "/") {
			return fmt.Errorf("instance %q: name must contain no '/' (it separates a variable from its properties in node ids)", in.Name)
		}
		if strings.HasPrefix(in.Name, conditionPrefix) {
			return fmt.Errorf("instance %q: name must not begin with %q (the node ids of conditions do)", in.Name, conditionPrefix)
		}
		if folders[in.Name] {
			return fmt.Errorf("instance %q declared twice", in.Name)
		}
		folders[in.Name] = true
		for _, a := range in.Attributes {
			if a.Name == "" || strings.Contains(a.Name, ".") {
				return fmt.Errorf("instance %q: attribute name %q must be non-empty and contain no dot", in.Name, a.Name)
			}
			if strings.Contains(a.Name, "/") {
				return fmt.Errorf("instance %q: attribute name %q must contain no '/' (it separates a variable from its properties in node ids)", in.Name, a.Name)
			}
			if _, ok := dataTypeNames[a.Type]; !ok {
				return fmt.Errorf("attribute %s.%s: unknown data type %d", in.Name, a.Name, int(a.Type))
			}
			if r := a.EURange; r != nil && !(r.Low < r.High) {
				return fmt.Errorf("attribute %s.%s: EURange low %v is not below high %v", in.Name, a.Name, r.Low, r.High)
			}
			key := in.Name + "." + a.Name
			if vars[key] {
				return fmt.Errorf("attribute %s declared twice", key)
			}
			vars[key] = true
		}
	}
	for k := range vars {
		if folders[k] {
			return fmt.Errorf("node id %q would name both an instance and an attribute", k)
		}
	}
	return nil
}

// coerce converts a feed value to the attribute's declared type. Numeric
// conversions must be exact: a value the declared type cannot hold is an
// error, never a silently wrapped number.
func coerce(t DataType, v any) (*ua.Variant, error) {
	if vv, ok := v.(*ua.Variant); ok {
		if vv == nil {
			return nil, fmt.Errorf("nil variant")
		}
		v = vv.Value()
	}
	switch t {
	case TypeBoolean:
		if b, ok := v.(bool); ok {
			return ua.MustVariant(b), nil
		}
	case TypeString:
		if s, ok := v.(string); ok {
			return ua.MustVariant(s), nil
		}
	case TypeDateTime:
		if tm, ok := v.(time.Time); ok {
			return ua.MustVariant(tm), nil
		}
	case TypeDouble:
		if f, ok := numeric.Float(v); ok {
			return ua.MustVariant(f), nil
		}
	case TypeFloat:
		if f, ok := numeric.Float(v); ok && (math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) <= math.MaxFloat32) {
			return ua.MustVariant(float32(f)), nil
		}
	case TypeInt32:
		if i, ok := numeric.Int(v); ok && i >= math.MinInt32 && i <= math.MaxInt32 {
			return ua.MustVariant(int32(i)), nil
		}
	case TypeInt64:
		if i, ok := numeric.Int(v); ok {
			return ua.MustVariant(i), nil
		}
	}
	return nil, fmt.Errorf("value %v (%T) does not fit %s", v, v, t)
}

// writeTypeOK reports whether a client-written variant has exactly the
// declared type. Client writes are not coerced: OPC UA clients read the
// DataType attribute and must send that type (Part 4, 5.10.4: BadTypeMismatch).
func writeTypeOK(t DataType, v *ua.Variant) bool {
	if v == nil || v.Type() != t.typeID() {
		return false
	}
	return v.ArrayLength() == 0 && v.Value() != nil
}
