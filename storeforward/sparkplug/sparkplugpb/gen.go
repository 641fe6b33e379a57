// Package sparkplugpb is the Sparkplug B payload (Eclipse Tahu's
// sparkplug_b.proto, the specification's public schema) generated for Go.
// Regenerate with `go generate ./storeforward/sparkplug/sparkplugpb` (needs
// protoc, and protoc-gen-go at the version go.mod pins on PATH:
// `go install google.golang.org/protobuf/cmd/protoc-gen-go`).
package sparkplugpb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go_opt=Msparkplug_b.proto=github.com/scadad/scadad/storeforward/sparkplug/sparkplugpb sparkplug_b.proto
