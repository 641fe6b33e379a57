// Package grpcdial holds the one set of gRPC dial parameters: how every
// client of the project (peers forwarding over the control API, scadactl,
// the benchmark, the gateway client) redials, what message size it
// accepts, and the control API's flow-control windows (both ends). It owns
// only those parameters, never a connection.
package grpcdial

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
)

// MaxMessageBytes is the largest control API message either way; the
// server (cmd/scadad) takes the same.
const MaxMessageBytes = 64 << 20

// ConnectParams keep dial attempts to a peer or gateway that is down about
// a second apart (1 s ± 20 % at most). grpc's default backoff grows to two
// minutes: after a partition of a few seconds a node's forwards and the
// heal probe of a split pair failed for seconds after the network was
// back, and a gateway back after a few minutes' outage waited up to two
// minutes for its session. minConnect bounds one connection attempt.
func ConnectParams(minConnect time.Duration) grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: minConnect,
	}
}

// ControlAPI is how every client dials a node's control API: mutual TLS
// with conf, the control API's message size, ConnectParams and
// FlowControl.
func ControlAPI(conf *tls.Config) []grpc.DialOption {
	return append([]grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(conf)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithConnectParams(ConnectParams(2 * time.Second)),
	}, FlowControl()...)
}

// The control API's flow-control windows, the same on both ends: a
// stream may have streamWindow bytes unread, a connection connWindow.
//
// Fixed windows turn off grpc-go's bandwidth-delay estimator, which sends
// a PING whenever DATA arrives and none is outstanding: on a connection
// carrying one small call at a time (a producer's enqueue, a forward) each
// side sent a PING and answered the other's on every call, twice the
// reads and writes of the call itself on both ends. The estimator only
// ever widens the window for bulk transfers on links of high bandwidth
// and delay; at 1 MiB a stream still moves a site artifact at 1 GB/s over
// a 1 ms round trip.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// FlowControl is the client's half of the control API's flow control.
func FlowControl() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow)}
}

// ServerFlowControl is the server's half (cmd/scadad's control API).
func ServerFlowControl() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow)}
}
