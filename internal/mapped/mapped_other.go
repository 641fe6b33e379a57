//go:build !linux

package mapped

// Range is one mapping, [Start, End).
type Range struct {
	Start, End uintptr
}

// Ranges finds nothing where there is no /proc/self/maps.
func Ranges(string) ([]Range, error) { return nil, nil }

// Drop does nothing here.
func Drop([]Range) error { return nil }

// ResidentKB is 0 here.
func ResidentKB(string) (int, error) { return 0, nil }
