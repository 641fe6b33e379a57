package field

import (
	"testing"

	"github.com/gopcua/opcua/ua"
)

// A gateway's DA quality words are served as the OPC UA codes that say
// the same, not flattened to Good or Bad (issue 22, defect 2); the limit
// bits come along; what the table lacks falls back by severity.
func TestQualityStatus(t *testing.T) {
	for _, tt := range []struct {
		q    Quality
		want ua.StatusCode
	}{
		{0xC0, ua.StatusGood},
		{0xD8, ua.StatusGoodLocalOverride},
		{0x40, ua.StatusUncertain},
		{0x44, ua.StatusUncertainLastUsableValue},
		{0x54, ua.StatusUncertainEngineeringUnitsExceeded},
		{0x00, ua.StatusBad},
		{0x04, ua.StatusBadConfigurationError},
		{0x08, ua.StatusBadNotConnected},
		{0x0C, ua.StatusBadDeviceFailure},
		{0x18, ua.StatusBadNoCommunication},
		{0x1C, ua.StatusBadOutOfService},
		{0xC1, ua.StatusGood | 0x100},                              // good, low limited
		{0x56, ua.StatusUncertainEngineeringUnitsExceeded | 0x200}, // high limited
		{0x13, ua.StatusBadSensorFailure | 0x300},                  // constant
		{0xC8, ua.StatusGood},                                      // a good substatus the table lacks
		{0x48, ua.StatusUncertain},
		{0x3C, ua.StatusBad},
		{0x80, ua.StatusBad}, // the DA "not used" quality is no Good
	} {
		if got := tt.q.Status(); got != tt.want {
			t.Errorf("Quality(0x%02X).Status() = 0x%08X, want 0x%08X", tt.q, uint32(got), uint32(tt.want))
		}
	}
	for q := range daStatus {
		if q == 0x14 {
			continue // last known value and communication failure share BadNoCommunication
		}
		for _, limit := range []Quality{0, 1, 2, 3} {
			if back := QualityOf((q | limit).Status()); back != q|limit {
				t.Errorf("QualityOf(Quality(0x%02X).Status()) = 0x%02X", q|limit, back)
			}
		}
	}
	if q := QualityOf(ua.StatusBadTimeout); q != 0x00 {
		t.Errorf("QualityOf(BadTimeout) = 0x%02X, want plain Bad", q)
	}
}
