package opcua

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gopcua/opcua/ua"
)

func TestModelValidate(t *testing.T) {
	tests := []struct {
		name    string
		m       Model
		wantErr string
	}{
		{"ok", testModel(), ""},
		{"empty model", Model{}, ""},
		{"dotted instance is fine", Model{Instances: []Instance{{Name: "Area.Pump1", Attributes: []Attribute{{Name: "Speed"}}}}}, ""},
		{"empty instance name", Model{Instances: []Instance{{Name: ""}}}, "empty name"},
		{"duplicate instance", Model{Instances: []Instance{{Name: "A"}, {Name: "A"}}}, "twice"},
		{"dotted attribute", Model{Instances: []Instance{{Name: "A", Attributes: []Attribute{{Name: "b.c"}}}}}, "no dot"},
		{"duplicate attribute", Model{Instances: []Instance{{Name: "A", Attributes: []Attribute{{Name: "x"}, {Name: "x"}}}}}, "twice"},
		{"unknown type", Model{Instances: []Instance{{Name: "A", Attributes: []Attribute{{Name: "x", Type: DataType(99)}}}}}, "unknown data type"},
		// Property node ids are "<instance>.<attribute>/<property>": a
		// slash in a name would make one id name two nodes.
		{"slash in instance", Model{Instances: []Instance{{Name: "Area/Pump1", Attributes: []Attribute{{Name: "Speed"}}}}}, `instance "Area/Pump1": name must contain no '/'`},
		{"slash in attribute", Model{Instances: []Instance{{Name: "A", Attributes: []Attribute{{Name: "b/EURange"}}}}}, "no '/'"},
		// Condition node ids are "alarm:<alarm>".
		{"instance named like a condition", Model{Instances: []Instance{{Name: "alarm:HighLevel"}}}, `must not begin with "alarm:"`},
		{"folder id equals variable id", Model{Instances: []Instance{
			{Name: "A", Attributes: []Attribute{{Name: "B"}}},
			{Name: "A.B"},
		}}, "both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCoerce(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		t      DataType
		in     any
		want   any
		errors bool
	}{
		{"double from float64", TypeDouble, 1.5, 1.5, false},
		{"double from int", TypeDouble, 3, 3.0, false},
		{"double from string", TypeDouble, "1.5", nil, true},
		{"float from float64", TypeFloat, 2.5, float32(2.5), false},
		{"float overflow", TypeFloat, 1e300, nil, true},
		{"int32 from integral float", TypeInt32, 42.0, int32(42), false},
		{"int32 from fractional float", TypeInt32, 42.5, nil, true},
		{"int32 overflow", TypeInt32, int64(math.MaxInt32) + 1, nil, true},
		{"int64 from uint64 too big", TypeInt64, uint64(math.MaxUint64), nil, true},
		{"int64 from int", TypeInt64, 7, int64(7), false},
		{"bool", TypeBoolean, true, true, false},
		{"bool from int", TypeBoolean, 1, nil, true},
		{"string", TypeString, "hi", "hi", false},
		{"datetime", TypeDateTime, now, now, false},
		{"variant unwrapped", TypeDouble, ua.MustVariant(float32(1.25)), 1.25, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := coerce(tt.t, tt.in)
			if tt.errors {
				if err == nil {
					t.Fatalf("coerce(%s, %v) = %v, want error", tt.t, tt.in, v.Value())
				}
				return
			}
			if err != nil {
				t.Fatalf("coerce(%s, %v): %v", tt.t, tt.in, err)
			}
			if v.Value() != tt.want {
				t.Fatalf("coerce(%s, %v) = %v (%T), want %v (%T)", tt.t, tt.in, v.Value(), v.Value(), tt.want, tt.want)
			}
			if v.Type() != tt.t.typeID() {
				t.Fatalf("variant type %v, want %v", v.Type(), tt.t.typeID())
			}
		})
	}
}

func TestParseDataType(t *testing.T) {
	for ty, name := range dataTypeNames {
		got, err := ParseDataType(strings.ToLower(name))
		if err != nil || got != ty {
			t.Errorf("ParseDataType(%q) = %v, %v", name, got, err)
		}
	}
	if _, err := ParseDataType("Quaternion"); err == nil {
		t.Error("ParseDataType accepted an unknown type")
	}
}
