//go:build linux

package faults

import (
	"context"
	"fmt"
	"net"
	"time"
)

// loopbackNet is the degraded fallback when namespaces cannot be made: all
// processes on 127.0.0.1 with free ports, no link can be cut (raft peers
// dial the addresses in the replicated configuration, so a per-link proxy
// would need a dial-address override raftnode does not have). Partitions
// become SIGSTOPs of the lone side and packet loss is skipped; the report
// and the log say so.
type loopbackNet struct{ why string }

func (l loopbackNet) Kind() string {
	return fmt.Sprintf("loopback (DEGRADED: %s; partitions are simulated by SIGSTOP, packet loss is skipped, latency only on client connections)", l.why)
}

func (loopbackNet) Host(string) string { return "" }

func (loopbackNet) Wrap(_ string, argv []string) []string { return argv }

func (loopbackNet) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func (loopbackNet) Apply(cut []link, loss float64) error {
	if len(cut) > 0 || loss > 0 {
		return fmt.Errorf("loopback mode cannot cut links")
	}
	return nil
}

func (loopbackNet) CanCut() bool { return false }

func (loopbackNet) CutAt() time.Time { return time.Time{} }

func (loopbackNet) Close() error { return nil }
