//go:build !unix

package netguard

// DescriptorLimit is 0 (unknown): Windows has no per-process descriptor
// limit of the same kind (handles are bounded by memory).
func DescriptorLimit() uint64 { return 0 }
