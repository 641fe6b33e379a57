//go:build !linux

package mqtttarget

import "net"

// quickAck does nothing where the kernel has no per-read quick
// acknowledgement (TCP_QUICKACK is Linux's).
func quickAck(net.Conn) func() { return func() {} }
