// Package fsmpb holds the protobuf commands of the replicated state machine
// and the records it stores. Regenerate with `go generate ./fsm/fsmpb`
// (needs protoc and protoc-gen-go on PATH).
package fsmpb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative command.proto state.proto
