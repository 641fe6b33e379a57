// Package featuregate keeps a mixed-version cluster from diverging: the
// leader refuses a command whose FSM feature level some member cannot
// apply yet (Gate), and every node records in the FSM the level it applies
// (Recorder), so the cluster's level is the lowest among the members of
// the raft configuration (voters, the witness and any nonvoter).
//
// It owns that decision and the records' upkeep. It must not: decide what
// level a command needs (fsm's level table does), apply anything itself
// (raft does), or keep package-level state. A node that nevertheless meets
// an entry it cannot apply stops applying (fsm.FSM.ApplyBlocked); this
// package only keeps that from happening in a cluster whose members all
// record their level.
package featuregate
