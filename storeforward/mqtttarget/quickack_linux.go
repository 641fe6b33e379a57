package mqtttarget

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// quickAck returns a func that asks the kernel to acknowledge what arrives
// on c at once, for its next reads (Linux reverts to delayed
// acknowledgement on its own, so it is asked again after every read).
func quickAck(c net.Conn) func() {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	return func() {
		_ = raw.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
		})
	}
}
