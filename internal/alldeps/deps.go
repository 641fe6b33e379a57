package alldeps

import (
	_ "github.com/anishathalye/porcupine"
	_ "github.com/gopcua/opcua"
	_ "github.com/gopcua/opcua/server"
	_ "github.com/gopcua/opcua/ua"
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-boltdb/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/rs/zerolog"
	_ "go.etcd.io/bbolt"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/credentials"
	_ "google.golang.org/protobuf/proto"
	_ "gopkg.in/yaml.v3"
)
