package sim

import (
	"fmt"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/siteconfig"
)

// Kind is the type of value the simulator sends for a tag. The MxAccess
// protocol carries no type with AddItem, so a real Galaxy attribute's type
// is known to the gateway alone; the simulator is told (Config.Kinds).
type Kind string

// The kinds, named as the site config names attribute types.
const (
	KindBool   Kind = Kind(siteconfig.TypeBool)
	KindInt32  Kind = Kind(siteconfig.TypeInt32)
	KindInt64  Kind = Kind(siteconfig.TypeInt64)
	KindFloat  Kind = Kind(siteconfig.TypeFloat)
	KindDouble Kind = Kind(siteconfig.TypeDouble)
	KindString Kind = Kind(siteconfig.TypeString)
)

// KindsOf returns the kind of every tag a site config reads from an
// MxAccess connection, so the simulator sends what each attribute declares.
func KindsOf(site *siteconfig.Site) map[string]Kind {
	mx := map[string]bool{}
	for _, c := range site.Connections {
		if c.Kind == siteconfig.KindMxAccess {
			mx[c.Name] = true
		}
	}
	kinds := map[string]Kind{}
	for _, inst := range site.Instances {
		for _, a := range inst.Attributes {
			conn := a.Connection
			if conn == "" {
				conn = inst.Connection
			}
			if mx[conn] {
				kinds[a.Tag] = Kind(a.Type)
			}
		}
	}
	return kinds
}

// value is the n-th value of an item of this kind: it changes at every
// step, and items of one session differ by their handle. A tag of no
// known kind gets a Double, as MXAccess reports most analog attributes.
func (k Kind) value(n int64, it *item) field.Value {
	switch k {
	case KindBool:
		return n%2 == 1
	case KindInt32, KindInt64:
		return n + int64(it.handle)
	case KindString:
		return fmt.Sprintf("%s #%d", it.tag, n)
	default:
		return float64(n) + float64(it.handle)/1000
	}
}
