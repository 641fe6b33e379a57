package fsm

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// Level is an FSM feature level: the set of commands a node can apply.
// Every release that adds a command body raises it by one.
type Level uint32

// FeatureLevel is the highest level this build applies.
const FeatureLevel Level = 4

// commandLevel is THE table of command levels: the feature level a node
// needs to apply each command body (the field name in fsmpb.Command's body
// oneof). A new command goes here at FeatureLevel, raising FeatureLevel
// (and levelRelease) first if this release has not raised it yet; the
// leader refuses it (Gate) until every member records that level, and a
// node that applies less stops applying at it instead of skipping it.
// TestEveryCommandHasALevel fails for a body missing here.
func commandLevel(body protoreflect.Name) (Level, bool) {
	switch body {
	case "noop", "put_artifact_chunk", "commit_artifact", "deploy", "deploy_ack",
		"sf_enqueue", "sf_delivered", "sf_park", "sf_retry", "sf_discard",
		"audit", "set_cluster_epoch":
		return 1, true
	case "record_features":
		// Level 1 by exception: it is how levels become known. A v0.1.0
		// node refuses it as an unknown body, changing nothing (it keeps
		// no records), and a member without a record counts as level 1.
		return 1, true
	case "cert_revoke", "token_create", "token_revoke",
		"opcua_trust_add", "opcua_trust_remove", "opcua_trust_reject", "opcua_user_set", "opcua_user_remove":
		// v0.2.0: the certificate deny list, bearer tokens, the OPC UA
		// trust store and user-name identities (docs/security.md).
		return 2, true
	case "sf_attempts":
		// v0.2.0: replicated delivery attempts (docs/store-and-forward.md).
		return 2, true
	case "alarm_observe", "alarm_ack", "alarm_shelve", "alarm_comment", "alarm_history_mark":
		// v0.2.0 (level 3): the replicated alarm state (docs/alarms.md).
		return 3, true
	case "sf_birth":
		// v0.2.0 (level 4): Sparkplug B sessions, bdSeq replicated
		// (docs/store-and-forward.md).
		return 4, true
	case "checkpoint", "checkpoint_report":
		// v0.2.0: cross-node state checkpoints (docs/faults.md).
		return 2, true
	case "feature_probe":
		return FeatureLevel + 1, true
	}
	return 0, false
}

// levelRelease names the first release that applies level l.
func levelRelease(l Level) string {
	switch l {
	case 1:
		return "v0.1.0"
	case 2:
		return "v0.2.0"
	case 3, 4:
		// Raised in the same unreleased v0.2.0 as level 2: one release may
		// bring several levels; the leader still waits for each.
		return "v0.2.0"
	}
	return "an unreleased build"
}

// bodyField is the number of Command's body field.
func bodyName(n protowire.Number) (protoreflect.Name, bool) {
	fd := (&fsmpb.Command{}).ProtoReflect().Descriptor().Fields().ByNumber(n)
	if fd == nil || fd.ContainingOneof() == nil {
		return "", false
	}
	return fd.Name(), true
}

// levelOfBody is the level of a decoded command's body.
func levelOfBody(cmd *fsmpb.Command) (Level, protoreflect.Name, bool) {
	m := cmd.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("body")
	fd := m.WhichOneof(od)
	if fd == nil {
		return 0, "", false
	}
	l, ok := commandLevel(fd.Name())
	return l, fd.Name(), ok
}

// EntryLevel reads the feature level a command needs from its encoded
// bytes without decoding its body (the leader runs it on every entry): the
// higher of the stamped level and the table's level for the body. An
// unknown body is an error: this build cannot tell what it needs.
func EntryLevel(data []byte) (Level, error) {
	var stamped Level
	var body protoreflect.Name
	for b := data; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("malformed command (%d bytes)", len(data))
		}
		b = b[n:]
		if num == 4 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, fmt.Errorf("malformed command (%d bytes)", len(data))
			}
			stamped = Level(v)
		} else if name, ok := bodyName(num); ok {
			body = name
		} else if num >= 10 {
			return 0, fmt.Errorf("command body field %d is not known to this node (FSM feature level %d)", num, FeatureLevel)
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, fmt.Errorf("malformed command (%d bytes)", len(data))
		}
		b = b[m:]
	}
	if body == "" {
		return 0, fmt.Errorf("command has no body")
	}
	l, ok := commandLevel(body)
	if !ok {
		return 0, fmt.Errorf("command body %s has no feature level in this build", body)
	}
	return max(l, stamped, 1), nil
}

// stampLevel fills the envelope's level fields from the table.
func stampLevel(cmd *fsmpb.Command) error {
	l, name, ok := levelOfBody(cmd)
	if !ok {
		return fmt.Errorf("command body %s has no feature level (add it to fsm's level table)", name)
	}
	cmd.FeatureLevel = uint32(l)
	cmd.NeedsRelease = ""
	if l > 1 {
		cmd.NeedsRelease = levelRelease(l)
	}
	return nil
}

// BlockedError is what a node that meets an entry above its feature level
// answers for that entry and every later one: it stops applying (raft
// keeps the log) until it runs a release that applies the level.
type BlockedError struct {
	Index        uint64
	Need         Level
	NeedsRelease string
	Have         Level
}

func (e *BlockedError) Error() string {
	rel := e.NeedsRelease
	if rel == "" {
		rel = levelRelease(e.Need)
	}
	return fmt.Sprintf("fsm apply blocked at entry %d: it needs FSM feature level %d (scadad %s or newer), this node applies up to level %d (%s); upgrade this node",
		e.Index, e.Need, rel, e.Have, levelRelease(e.Have))
}

// blockOf reports whether the entry at index needs more than have. It
// looks only at the envelope and the body's table level, so it works for
// bodies this build does not know.
func blockOf(index uint64, cmd *fsmpb.Command, have Level) *BlockedError {
	need := Level(cmd.FeatureLevel)
	if l, _, ok := levelOfBody(cmd); ok && l > need {
		need = l
	}
	if need <= have {
		return nil
	}
	return &BlockedError{Index: index, Need: need, NeedsRelease: cmd.NeedsRelease, Have: have}
}
