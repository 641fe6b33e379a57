package numeric

import (
	"math"
	"testing"
)

func TestFloat(t *testing.T) {
	tests := []struct {
		in   any
		want float64
		ok   bool
	}{
		{float64(1.5), 1.5, true},
		{float32(0.25), 0.25, true},
		{int(-3), -3, true},
		{int8(-8), -8, true},
		{int16(16), 16, true},
		{int32(-32), -32, true},
		{int64(1 << 40), 1 << 40, true},
		{uint(7), 7, true},
		{uint8(255), 255, true},
		{uint16(65535), 65535, true},
		{uint32(1 << 31), 1 << 31, true},
		{uint64(math.MaxUint64), math.MaxUint64, true},
		{"1.5", 0, false},
		{true, 0, false},
		{nil, 0, false},
		{[]float64{1}, 0, false},
	}
	for _, tt := range tests {
		got, ok := Float(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Float(%#v) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestInt(t *testing.T) {
	tests := []struct {
		in   any
		want int64
		ok   bool
	}{
		{int(-3), -3, true},
		{int8(math.MinInt8), math.MinInt8, true},
		{int16(math.MaxInt16), math.MaxInt16, true},
		{int32(math.MinInt32), math.MinInt32, true},
		{int64(math.MaxInt64), math.MaxInt64, true},
		{uint(9), 9, true},
		{uint8(200), 200, true},
		{uint16(60000), 60000, true},
		{uint32(math.MaxUint32), math.MaxUint32, true},
		{uint64(math.MaxInt64), math.MaxInt64, true},
		{uint64(math.MaxInt64 + 1), 0, false},
		{float64(42), 42, true},
		{float64(-0.5), 0, false},
		{float64(math.MinInt64), math.MinInt64, true},
		{float64(math.MaxInt64), 0, false}, // rounds up to 2^63
		{math.Inf(1), 0, false},
		{math.NaN(), 0, false},
		{float32(3), 3, true},
		{float32(3.5), 0, false},
		{"3", 0, false},
		{false, 0, false},
		{nil, 0, false},
	}
	for _, tt := range tests {
		got, ok := Int(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Int(%#v) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
