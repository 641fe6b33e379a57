package testcluster

// The port helpers build on every platform (the rest of the package is
// Unix-only), so unit tests that need a free or dead loopback port build
// and vet for Windows too.

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// FreePorts reserves n distinct loopback ports. They are drawn from below
// the kernel's ephemeral range, so no outgoing connection of any process can
// take one between this check and the node's bind (a port the kernel handed
// out for :0 could: a test once failed on "address already in use"); each
// is checked free by binding it, and the listeners are closed before return.
func FreePorts(n int) ([]int, error) {
	low := ephemeralLow()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("reserve port: no free port in 10000..%d after 1000 tries", low-1)
		}
		port := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// DeadAddr is a loopback host:port nothing listens on, for a test of a peer
// that never answers: a free port from below the ephemeral range (FreePorts),
// so no outgoing connection takes it meanwhile.
func DeadAddr() (string, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0]), nil
}

// ephemeralLow is the lowest port the kernel hands out for outgoing
// connections (32768 when it cannot be read).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > 11000 {
			low = lo
		}
	}
	return low
}
