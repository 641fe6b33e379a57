//go:build unix

package raftnode

import (
	"context"
	"crypto/tls"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/pki"
)

// BenchmarkProbe measures one probe of a member over loopback, both ends'
// CPU included (the prober's and the member's run in this process): with
// a full mutual-TLS handshake each time, and resuming the last session.
func BenchmarkProbe(b *testing.B) {
	site, err := pki.GenerateSite("s", []string{"a", "b"}, nil, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	members := staticDirectory{{ID: "a", RaftAddr: ln.Addr().String()}, {ID: "b", RaftAddr: "127.0.0.1:2"}}
	tlsOf := func(f func(string) (*tls.Config, error), name string) *tls.Config {
		c, err := f(name)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	a := newTLSStream(ln, ln.Addr().String(), tlsOf(site.ServerTLS, "a"), tlsOf(site.ClientTLS, "a"), members,
		func(string) {}, func() peerStatus { return peerStatus{ID: "a"} }, zerolog.Nop())
	defer a.close()
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := newTLSStream(bln, "127.0.0.1:2", tlsOf(site.ServerTLS, "b"), tlsOf(site.ClientTLS, "b"), members,
		func(string) {}, func() peerStatus { return peerStatus{} }, zerolog.Nop())
	defer p.close()
	for _, mode := range []string{"full", "resumed"} {
		b.Run(mode, func(b *testing.B) {
			cpu0 := processCPU(b)
			for b.Loop() {
				if mode == "full" {
					p.sessions.forget("a")
				}
				if _, err := p.probe(context.Background(), ln.Addr().String()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
