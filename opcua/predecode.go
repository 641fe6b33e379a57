package opcua

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/gopcua/opcua/ua"
)

// The bounded pre-decode (WORKAROUNDS.md row 18): before the library's
// decoder sees a request, the front walks it the way that decoder will,
// field by field over the request's Go type, reading lengths and counts
// without building anything, and refuses what would make the decoder
// allocate far more than the message carries or nest without end:
//
//   - a Variant declaring more array dimensions than the bytes left could
//     hold (the decoder makes the dimension array first: 2^31-1 of them is
//     8 GiB; upstream PR #893), or more than maxArrayDimensions;
//   - dimensions whose product does not fit an int32 (the decoder
//     multiplies them in an int32: a product that wraps to the array's
//     length passes its check, and its reshaping then builds one slice per
//     element of every dimension but the last);
//   - a Variant array longer than the bytes left (each element takes at
//     least one byte; the decoder makes the slice and a value per element
//     first), or of a negative length other than -1 (the decoder panics;
//     upstream PR #892);
//   - Variants, DataValues, ExtensionObjects and DiagnosticInfos nested
//     deeper than maxNesting (Part 6, 5.2.2.16: decoders shall support at
//     least 100 levels and report an error beyond what they support; the
//     library recurses without a limit).
//
// What the library itself refuses before allocating (a truncated message,
// an unknown type, a slice longer than the message) ends the walk as
// errLibraryRefuses: the library answers it as it does today.

const (
	maxNesting         = 100
	maxArrayDimensions = 32
)

// errLibraryRefuses ends the walk where the library's decoder stops with
// an error of its own, having allocated nothing out of bounds.
var errLibraryRefuses = errors.New("the decoder refuses this itself")

// encodingLimitsError says what in a request exceeds the pre-decode's
// bounds; the connection is refused with BadEncodingLimitsExceeded.
type encodingLimitsError struct{ why string }

func (e *encodingLimitsError) Error() string { return e.why }

func exceeds(format string, args ...any) error {
	return &encodingLimitsError{why: fmt.Sprintf(format, args...)}
}

// checkEncodingLimits walks a request body (its type id, then the request)
// and returns an *encodingLimitsError for what the decoder must not be
// given; nil otherwise, including for what the library refuses itself.
func checkEncodingLimits(body []byte) error {
	typeID := new(ua.ExpandedNodeID)
	n, err := typeID.Decode(body)
	if err != nil {
		return nil
	}
	// The library's own service registry gives the request's type: with
	// nothing after the type id its decoder stops at the first field.
	_, req, _ := ua.DecodeService(body[:n])
	if req == nil {
		return nil // not a service the library knows: it refuses it
	}
	s := &preDecoder{b: body, at: n}
	if err := s.walk(reflect.TypeOf(req)); err != nil && !errors.Is(err, errLibraryRefuses) {
		return err
	}
	return nil
}

// preDecoder reads b from at, as the library's decoder would.
type preDecoder struct {
	b     []byte
	at    int
	depth int
}

var (
	decoderType   = reflect.TypeOf((*ua.BinaryDecoder)(nil)).Elem()
	timeType      = reflect.TypeOf(time.Time{})
	variantPtr    = reflect.TypeOf(&ua.Variant{})
	dataValuePtr  = reflect.TypeOf(&ua.DataValue{})
	extensionPtr  = reflect.TypeOf(&ua.ExtensionObject{})
	diagnosticPtr = reflect.TypeOf(&ua.DiagnosticInfo{})
)

// builtinTypes are the Go types of the Variant built-in type ids (Part 6,
// 5.1.2), as the library decodes each element: the wire format the walk
// follows.
var builtinTypes = [...]reflect.Type{
	ua.TypeIDBoolean:         reflect.TypeOf(false),
	ua.TypeIDSByte:           reflect.TypeOf(int8(0)),
	ua.TypeIDByte:            reflect.TypeOf(uint8(0)),
	ua.TypeIDInt16:           reflect.TypeOf(int16(0)),
	ua.TypeIDUint16:          reflect.TypeOf(uint16(0)),
	ua.TypeIDInt32:           reflect.TypeOf(int32(0)),
	ua.TypeIDUint32:          reflect.TypeOf(uint32(0)),
	ua.TypeIDInt64:           reflect.TypeOf(int64(0)),
	ua.TypeIDUint64:          reflect.TypeOf(uint64(0)),
	ua.TypeIDFloat:           reflect.TypeOf(float32(0)),
	ua.TypeIDDouble:          reflect.TypeOf(float64(0)),
	ua.TypeIDString:          reflect.TypeOf(""),
	ua.TypeIDDateTime:        timeType,
	ua.TypeIDGUID:            reflect.TypeOf(&ua.GUID{}),
	ua.TypeIDByteString:      reflect.TypeOf([]byte(nil)),
	ua.TypeIDXMLElement:      reflect.TypeOf(""),
	ua.TypeIDNodeID:          reflect.TypeOf(&ua.NodeID{}),
	ua.TypeIDExpandedNodeID:  reflect.TypeOf(&ua.ExpandedNodeID{}),
	ua.TypeIDStatusCode:      reflect.TypeOf(uint32(0)),
	ua.TypeIDQualifiedName:   reflect.TypeOf(&ua.QualifiedName{}),
	ua.TypeIDLocalizedText:   reflect.TypeOf(&ua.LocalizedText{}),
	ua.TypeIDExtensionObject: extensionPtr,
	ua.TypeIDDataValue:       dataValuePtr,
	ua.TypeIDVariant:         variantPtr,
	ua.TypeIDDiagnosticInfo:  diagnosticPtr,
}

func (s *preDecoder) left() int { return len(s.b) - s.at }

func (s *preDecoder) skip(n int) error {
	if n < 0 || n > s.left() {
		return errLibraryRefuses
	}
	s.at += n
	return nil
}

func (s *preDecoder) u8() (byte, error) {
	if s.left() < 1 {
		return 0, errLibraryRefuses
	}
	s.at++
	return s.b[s.at-1], nil
}

func (s *preDecoder) u32() (uint32, error) {
	if s.left() < 4 {
		return 0, errLibraryRefuses
	}
	s.at += 4
	b := s.b[s.at-4 : s.at]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24, nil
}

// nest counts one more level of a nesting type; leave with unnest.
func (s *preDecoder) nest(what string) error {
	s.depth++
	if s.depth > maxNesting {
		return exceeds("%s nested more than %d levels deep", what, maxNesting)
	}
	return nil
}

func (s *preDecoder) unnest() { s.depth-- }

// walk reads one value of type t, following the library's decode: its own
// codec where the type has one, else by kind.
func (s *preDecoder) walk(t reflect.Type) error {
	if t.Implements(decoderType) {
		return s.custom(t)
	}
	if t.ConvertibleTo(timeType) {
		return s.skip(8)
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int8, reflect.Uint8:
		return s.skip(1)
	case reflect.Int16, reflect.Uint16:
		return s.skip(2)
	case reflect.Int32, reflect.Uint32, reflect.Float32:
		return s.skip(4)
	case reflect.Int64, reflect.Uint64, reflect.Float64:
		return s.skip(8)
	case reflect.String:
		return s.byteString()
	case reflect.Ptr:
		return s.walk(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if err := s.walk(t.Field(i).Type); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		n, err := s.u32()
		if err != nil || n == math.MaxUint32 {
			return err
		}
		// The library refuses a count over the bytes left (slices) or
		// over the array's size before making anything.
		if n > math.MaxInt32 || int(n) > s.left() || (t.Kind() == reflect.Array && int(n) > t.Len()) {
			return errLibraryRefuses
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return s.skip(int(n))
		}
		for range n {
			if err := s.walk(t.Elem()); err != nil {
				return err
			}
		}
		return nil
	}
	return errLibraryRefuses
}

// byteString reads a String or ByteString: an int32 length (0 or -1 for
// none), then the bytes.
func (s *preDecoder) byteString() error {
	n, err := s.u32()
	if err != nil || n == 0 || n == math.MaxUint32 {
		return err
	}
	if n > math.MaxInt32 {
		return errLibraryRefuses
	}
	return s.skip(int(n))
}

// custom reads a type with its own codec in the library: the four that
// hold other values are walked here; the rest (node ids, GUIDs, localized
// text) read only fixed fields and strings, and the library's own Decode
// measures them.
func (s *preDecoder) custom(t reflect.Type) error {
	switch t {
	case variantPtr:
		return s.variant()
	case dataValuePtr:
		return s.dataValue()
	case extensionPtr:
		return s.extensionObject()
	case diagnosticPtr:
		return s.diagnosticInfo()
	}
	if t.Kind() != reflect.Ptr {
		return errLibraryRefuses
	}
	v, ok := reflect.New(t.Elem()).Interface().(ua.BinaryDecoder)
	if !ok {
		return errLibraryRefuses
	}
	n, err := v.Decode(s.b[s.at:])
	if err != nil {
		return errLibraryRefuses
	}
	return s.skip(n)
}

// variant reads a Variant (Part 6, 5.2.2.16): an encoding mask, a value
// or an array of them, and for a multi-dimensional array its dimensions.
func (s *preDecoder) variant() error {
	if err := s.nest("Variants"); err != nil {
		return err
	}
	defer s.unnest()
	mask, err := s.u8()
	if err != nil {
		return err
	}
	typ := mask & 0x3f
	if typ == 0 {
		return nil
	}
	if int(typ) >= len(builtinTypes) {
		return errLibraryRefuses
	}
	elem := builtinTypes[typ]
	if mask&ua.VariantArrayValues == 0 {
		return s.walk(elem)
	}
	u, err := s.u32()
	if err != nil {
		return err
	}
	length := int32(u)
	switch {
	case length < -1:
		return exceeds("a Variant array of length %d", length)
	case int(length) > ua.MaxVariantArrayLength:
		return errLibraryRefuses
	case int(length) > s.left():
		return exceeds("a Variant array of %d elements with %d bytes left in the message", length, s.left())
	}
	for range max(length, 0) {
		if err := s.walk(elem); err != nil {
			return err
		}
	}
	if mask&ua.VariantArrayDimensions == 0 {
		return nil
	}
	u, err = s.u32()
	if err != nil {
		return err
	}
	dims := int32(u)
	switch {
	case dims < 0:
		return errLibraryRefuses
	case int(dims) > s.left()/4:
		return exceeds("a Variant with %d array dimensions and %d bytes left in the message", dims, s.left())
	case dims > maxArrayDimensions:
		return exceeds("a Variant with %d array dimensions, more than %d", dims, maxArrayDimensions)
	}
	product := int64(1)
	for range dims {
		d, err := s.u32()
		if err != nil {
			return err
		}
		if int32(d) < 1 {
			return errLibraryRefuses
		}
		if product *= int64(d); product > math.MaxInt32 {
			return exceeds("a Variant whose array dimensions multiply to more than %d elements", math.MaxInt32)
		}
	}
	return nil
}

// dataValue reads a DataValue (Part 6, 5.2.2.17): an encoding mask, then
// the fields it names, in the library's order.
func (s *preDecoder) dataValue() error {
	if err := s.nest("DataValues"); err != nil {
		return err
	}
	defer s.unnest()
	mask, err := s.u8()
	if err != nil {
		return err
	}
	if mask&ua.DataValueValue != 0 {
		if err := s.variant(); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		bit  byte
		size int
	}{{ua.DataValueStatusCode, 4}, {ua.DataValueSourceTimestamp, 8}, {ua.DataValueSourcePicoseconds, 2},
		{ua.DataValueServerTimestamp, 8}, {ua.DataValueServerPicoseconds, 2}} {
		if mask&f.bit != 0 {
			if err := s.skip(f.size); err != nil {
				return err
			}
		}
	}
	return nil
}

// diagnosticInfo reads a DiagnosticInfo (Part 6, 5.2.2.12), which may hold
// another.
func (s *preDecoder) diagnosticInfo() error {
	if err := s.nest("DiagnosticInfos"); err != nil {
		return err
	}
	defer s.unnest()
	mask, err := s.u8()
	if err != nil {
		return err
	}
	for _, bit := range []byte{ua.DiagnosticInfoSymbolicID, ua.DiagnosticInfoNamespaceURI, ua.DiagnosticInfoLocale, ua.DiagnosticInfoLocalizedText} {
		if mask&bit != 0 {
			if err := s.skip(4); err != nil {
				return err
			}
		}
	}
	if mask&ua.DiagnosticInfoAdditionalInfo != 0 {
		if err := s.byteString(); err != nil {
			return err
		}
	}
	if mask&ua.DiagnosticInfoInnerStatusCode != 0 {
		if err := s.skip(4); err != nil {
			return err
		}
	}
	if mask&ua.DiagnosticInfoInnerDiagnosticInfo != 0 {
		return s.diagnosticInfo()
	}
	return nil
}

// extensionObject reads an ExtensionObject (Part 6, 5.2.2.15): a type id,
// an encoding byte, a length and a body, which the library decodes as the
// type registered for that id (an unknown id's body stays bytes).
func (s *preDecoder) extensionObject() error {
	if err := s.nest("ExtensionObjects"); err != nil {
		return err
	}
	defer s.unnest()
	start := s.at
	if err := s.custom(reflect.TypeOf(&ua.ExpandedNodeID{})); err != nil {
		return err
	}
	typeID := s.b[start:s.at]
	encoding, err := s.u8()
	if err != nil || encoding == ua.ExtensionObjectEmpty {
		return err
	}
	n, err := s.u32()
	if err != nil || n == 0 || n == math.MaxUint32 {
		return err
	}
	if n > math.MaxInt32 || int(n) > s.left() {
		return errLibraryRefuses
	}
	body := s.b[s.at : s.at+int(n)]
	s.at += int(n)
	if encoding == ua.ExtensionObjectXML {
		return nil // a string
	}
	t := registeredType(typeID)
	if t == nil {
		return nil
	}
	inner := &preDecoder{b: body, depth: s.depth}
	return inner.walk(t)
}

// registeredType is the Go type the library decodes an extension object
// body of this type id (its encoded bytes) as; nil when none is
// registered. The library keeps its registry to itself: an extension
// object with a one-byte body shows the type it picks, and a one-byte
// body cannot make the decoder allocate anything to speak of.
func registeredType(typeID []byte) reflect.Type {
	probe := make([]byte, 0, len(typeID)+6)
	probe = append(probe, typeID...)
	probe = append(probe, ua.ExtensionObjectBinary, 1, 0, 0, 0, 0)
	var e ua.ExtensionObject
	_, _ = e.Decode(probe)
	if e.Value == nil {
		return nil
	}
	return reflect.TypeOf(e.Value)
}
