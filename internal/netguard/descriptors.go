package netguard

// FitDescriptors scales the listeners' MaxConns down, in proportion, so
// that they and reserve (what raft, the state files, the logs and outgoing
// connections need) fit in limit descriptors; a per-address bound never
// exceeds its listener's total. limit 0 (unknown) changes nothing. It
// reports whether anything was scaled.
func FitDescriptors(limit uint64, reserve int, budgets ...*Limits) bool {
	if limit == 0 {
		return false
	}
	sum := 0
	for _, b := range budgets {
		sum += b.MaxConns
	}
	room := int(min(limit, 1<<30)) - reserve
	if room < len(budgets) {
		room = len(budgets) // one connection each: a listener that takes none is deaf
	}
	scaled := false
	for _, b := range budgets {
		if sum > room && b.MaxConns > 0 {
			b.MaxConns = max(1, b.MaxConns*room/sum)
			scaled = true
		}
		if b.MaxConns > 0 && b.MaxConnsPerAddr > b.MaxConns {
			b.MaxConnsPerAddr = b.MaxConns
		}
	}
	return scaled
}
