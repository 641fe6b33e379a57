package fsm

import (
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/fsm/fsmpb"
)

// CommandVersion is the envelope version this build writes and the newest it
// applies.
const CommandVersion = 1

// Encode returns the bytes of cmd for raft.Apply. A zero Version is filled
// with CommandVersion (on cmd itself).
func Encode(cmd *fsmpb.Command) ([]byte, error) {
	if cmd == nil {
		return nil, cmdErr(CodeInvalid, "nil command")
	}
	if cmd.GetBody() == nil {
		return nil, cmdErr(CodeInvalid, "command has no body")
	}
	if cmd.Version == 0 {
		cmd.Version = CommandVersion
	}
	if err := stampLevel(cmd); err != nil {
		return nil, cmdErr(CodeInvalid, "encode command: %v", err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cmd)
	if err != nil {
		return nil, cmdErr(CodeInvalid, "encode command: %v", err)
	}
	return b, nil
}

// Decode parses a log entry's data. Errors are *CommandError values whose
// message depends only on data, so every node reports the same one.
func Decode(data []byte) (*fsmpb.Command, error) {
	cmd, err := unmarshalCommand(data)
	if err != nil {
		return nil, err
	}
	if err := checkDecoded(cmd); err != nil {
		return nil, err
	}
	return cmd, nil
}

// unmarshalCommand parses the envelope; an unknown body decodes to none.
func unmarshalCommand(data []byte) (*fsmpb.Command, *CommandError) {
	var cmd fsmpb.Command
	if err := proto.Unmarshal(data, &cmd); err != nil {
		// The protobuf error text is stable for given bytes and library
		// version, but keep the replicated message independent of it.
		return nil, cmdErr(CodeDecode, "malformed command (%d bytes)", len(data))
	}
	return &cmd, nil
}

// checkDecoded refuses an envelope version or a body this build does not
// know.
func checkDecoded(cmd *fsmpb.Command) *CommandError {
	if cmd.Version == 0 || cmd.Version > CommandVersion {
		return cmdErr(CodeUnsupportedVersion, "command version %d, this node applies 1..%d", cmd.Version, CommandVersion)
	}
	if cmd.GetBody() == nil {
		return cmdErr(CodeDecode, "command has no known body")
	}
	return nil
}
