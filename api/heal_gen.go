package api

// The heal service has a proto file of its own in controlpb.
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative controlpb/heal.proto
