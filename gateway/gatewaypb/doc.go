// Package gatewaypb holds the generated MxAccess gateway contract
// (gateway.proto) and nothing else. Edit the .proto, never the .pb.go files.
//
//go:generate protoc -I ../.. --go_out=../.. --go_opt=paths=source_relative --go-grpc_out=../.. --go-grpc_opt=paths=source_relative ../../gateway/gatewaypb/gateway.proto
package gatewaypb
