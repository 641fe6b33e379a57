package field

import "fmt"

// Value is a tag value: nil, float64, int64, bool or string.
type Value any

// Quality is the OPC DA quality word MXAccess reports.
type Quality uint16

// The quality words scadad produces or interprets.
const (
	QualityBad             Quality = 0x00
	QualityBadConfigError  Quality = 0x04
	QualityBadNotConnected Quality = 0x08
	QualityBadCommFailure  Quality = 0x18
	QualityUncertain       Quality = 0x40
	QualityGood            Quality = 0xC0
)

// IsGood reports whether q is in the good range.
func (q Quality) IsGood() bool { return q&0xC0 == 0xC0 }

func (q Quality) String() string {
	switch {
	case q.IsGood():
		return "good"
	case q&0xC0 == 0x40:
		return "uncertain"
	default:
		return fmt.Sprintf("bad(0x%02x)", uint16(q))
	}
}
