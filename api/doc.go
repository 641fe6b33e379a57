// Package api holds the control API contract between scadactl and scadad.
//
// The protobuf definitions live in controlpb; this package only documents the
// conventions: every RPC runs under mutual TLS, writes sent to a follower are
// forwarded to the leader by the server, and failures carry gRPC status codes
// that scadactl maps to stable exit codes (see cmd/scadactl).
//
// Regenerate with `go generate ./api/...` (needs protoc, protoc-gen-go and
// protoc-gen-go-grpc on PATH). Without protoc, buf's own compiler does for
// messages (its header then says "protoc (unknown)"), from this folder:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate --path controlpb/control.proto \
//	  --template '{"version":"v2","plugins":[{"local":"protoc-gen-go","out":".","opt":"paths=source_relative"}]}'
//
// and with protoc-gen-go-grpc added as a second plugin for services.
package api

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative controlpb/control.proto
