package control

import "testing"

func TestShownIndexes(t *testing.T) {
	for _, tc := range []struct {
		name                                string
		raftCommit, raftApplied, fsmApplied uint64
		commit, applied                     uint64
	}{
		{"steady", 120, 120, 118, 120, 120},
		{"applying", 130, 125, 125, 130, 125},
		// A restarted follower: raft replays nothing the state machine
		// holds and knows no commit index until the leader's next append.
		{"restarted follower", 0, 40, 118, 118, 118},
		{"fresh node", 0, 0, 0, 0, 0},
	} {
		commit, applied := shownIndexes(tc.raftCommit, tc.raftApplied, tc.fsmApplied)
		if commit != tc.commit || applied != tc.applied {
			t.Errorf("%s: shownIndexes(%d, %d, %d) = %d/%d, want %d/%d", tc.name, tc.raftCommit, tc.raftApplied, tc.fsmApplied, commit, applied, tc.commit, tc.applied)
		}
	}
}
