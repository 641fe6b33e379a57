package heal

import "fmt"

// Facts are what one side of a split says about itself; the winner rule
// compares two of them.
type Facts struct {
	NodeID string
	Active bool
	Voters []string
	// ClusterEpoch is the side's replicated cluster epoch.
	ClusterEpoch uint64
	// OverrideUnixNano and OverrideIndex locate the side's newest committed
	// cluster-epoch record (leader stamp, raft index); zero if none.
	OverrideUnixNano int64
	OverrideIndex    uint64
	// Preferred is the preferred winner the side is configured with.
	Preferred string
	// Phase and MergeID describe the side's own heal progress.
	Phase   string
	MergeID string
}

// Verdict is the outcome of the winner rule.
type Verdict struct {
	Winner, Loser string
	Reason        string
}

// Decide applies the winner rule to the two sides of a split. It is
// symmetric: Decide(a, b) and Decide(b, a) name the same winner.
func Decide(a, b Facts) Verdict {
	pick := func(w, l Facts, why string) Verdict {
		return Verdict{Winner: w.NodeID, Loser: l.NodeID, Reason: why}
	}
	if a.Preferred != "" && a.Preferred == b.Preferred {
		switch a.Preferred {
		case a.NodeID:
			return pick(a, b, "configured preferred node")
		case b.NodeID:
			return pick(b, a, "configured preferred node")
		}
	}
	if a.OverrideUnixNano != b.OverrideUnixNano {
		why := fmt.Sprintf("its override came first (%d < %d ns)", min(a.OverrideUnixNano, b.OverrideUnixNano), max(a.OverrideUnixNano, b.OverrideUnixNano))
		if a.OverrideUnixNano < b.OverrideUnixNano {
			return pick(a, b, why)
		}
		return pick(b, a, why)
	}
	if a.NodeID < b.NodeID {
		return pick(a, b, "overrides at the same stamp; smaller node id")
	}
	return pick(b, a, "overrides at the same stamp; smaller node id")
}
