// Package numeric converts the numbers a field value may arrive as (any of
// Go's integer and float kinds, from the gateway's protobuf values or an
// OPC UA variant) to float64 or int64. It owns only the conversions and says
// whether one is exact; what a caller does with a value that does not
// convert is the caller's business.
package numeric

import "math"

// Float returns v as a float64 if v is any Go integer or float kind. Large
// 64-bit integers lose precision, as any float64 would.
func Float(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

// Int returns v as an int64 only when that is exact: an integer kind within
// int64's range, or a float with no fractional part within it.
func Int(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		if uint64(x) > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case float64:
		// -2^63 is exactly representable and fits; 2^63 (MaxInt64 rounded
		// up as a float) does not.
		if x != math.Trunc(x) || x < math.MinInt64 || x >= math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case float32:
		return Int(float64(x))
	}
	return 0, false
}
