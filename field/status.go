package field

import "github.com/gopcua/opcua/ua"

// OPC DA quality words (the gateway's, MXAccess's): the top two bits say
// Bad (00), Uncertain (01) or Good (11), the next four the substatus, the
// low two the limit (none, low, high, constant).
const (
	daQualityMask = 0xC0
	daStatusMask  = 0xFC
	daLimitMask   = 0x03
)

// daStatus maps a DA quality word's quality and substatus to the OPC UA
// StatusCode that says the same (after OPC UA Part 8, Annex A); docs/opcua.md
// carries the table. A substatus not listed maps to the plain Good,
// Uncertain or Bad.
var daStatus = map[Quality]ua.StatusCode{
	0x00: ua.StatusBad,
	0x04: ua.StatusBadConfigurationError,
	0x08: ua.StatusBadNotConnected,
	0x0C: ua.StatusBadDeviceFailure,
	0x10: ua.StatusBadSensorFailure,
	0x14: ua.StatusBadNoCommunication, // last known value: communication failed
	0x18: ua.StatusBadNoCommunication, // communication failure
	0x1C: ua.StatusBadOutOfService,
	0x20: ua.StatusBadWaitingForInitialData,
	0x40: ua.StatusUncertain,
	0x44: ua.StatusUncertainLastUsableValue,
	0x50: ua.StatusUncertainSensorNotAccurate,
	0x54: ua.StatusUncertainEngineeringUnitsExceeded,
	0x58: ua.StatusUncertainSubNormal,
	0xC0: ua.StatusGood,
	0xD8: ua.StatusGoodLocalOverride,
}

// Status is the OPC UA StatusCode a value with OPC DA quality word q is
// served with: the substatus mapped (daStatus), and the DA limit
// bits carried to the StatusCode's limit bits (Part 4, 7.39.1: low 0x100,
// high 0x200, constant 0x300).
func (q Quality) Status() ua.StatusCode {
	code, ok := daStatus[q&daStatusMask]
	if !ok {
		switch q & daQualityMask {
		case 0xC0:
			code = ua.StatusGood
		case 0x40:
			code = ua.StatusUncertain
		default:
			code = ua.StatusBad
		}
	}
	return code | ua.StatusCode(q&daLimitMask)<<8
}

// QualityOf is the OPC DA quality word closest to an OPC UA
// StatusCode, for what speaks DA qualities (the history records): the
// exact inverse of Status where the table has the code, the plain
// Good, Uncertain or Bad otherwise, and the limit bits carried back.
func QualityOf(code ua.StatusCode) Quality {
	limit := Quality(code>>8) & daLimitMask
	base := code &^ 0xFFFF // the code without its info bits
	if base == ua.StatusBadNoCommunication {
		return 0x18 | limit
	}
	for q, c := range daStatus {
		if c == base {
			return q | limit
		}
	}
	switch uint32(code) >> 30 {
	case 0:
		return 0xC0 | limit
	case 1:
		return 0x40 | limit
	default:
		return 0x00 | limit
	}
}
