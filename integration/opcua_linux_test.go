//go:build linux

package integration

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// A local process that connects to the OPC UA library's own loopback port
// and resets (a port scan of 127.0.0.1) ends the library's accept loop
// (opcua/WORKAROUNDS.md row 17). The node replaces the library: clients are
// served again, the site's values still Good, and the restart is counted.
func TestOPCUALibraryStoppedByALocalResetIsReplaced(t *testing.T) {
	sim, c, active, standby := opcuaPair(t, "-change", "0")
	deploySite(t, c, testcluster.SiteConfigGateway("reset", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	waitRedundancyLevels(t, active, standby, "")
	testwait.For(t, 20*time.Second, "a Good Pump1.Speed on the Active", func() bool {
		return goodValue(active.OPCUA, "urn:test:scadad", "Pump1.Speed")
	})

	library := libraryPort(t, active)
	conn, err := net.DialTimeout("tcp", library, 2*time.Second)
	if err != nil {
		t.Fatalf("dial the library's port %s: %v", library, err)
	}
	if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	reset := time.Now()

	// The first Hello after the reset goes unanswered (the peer's probe or
	// ours); HelloTimeout (10 s) later the library is replaced.
	testwait.For(t, 40*time.Second, "the restart counted on the Active", func() bool {
		return metricLine(active, "scadad_opcua_server_restarts_total") == "1"
	})

	testwait.For(t, 20*time.Second, "ServiceLevel 250 read from the Active again", func() bool {
		return serviceLevel(active.OPCUA) == 250
	})

	testwait.For(t, 10*time.Second, "the unchanging Pump1.Speed Good on the replaced library", func() bool {
		return goodValue(active.OPCUA, "urn:test:scadad", "Pump1.Speed")
	})

	t.Logf("served again %v after the reset", time.Since(reset).Round(time.Millisecond))
	if now := libraryPort(t, active); now == library {
		t.Fatalf("the library still listens on %s", now)
	}
}

// libraryPort finds the OPC UA library's loopback listener among the TCP
// ports n's process listens on: the one that is none of its configured
// addresses.
func libraryPort(t *testing.T, n *testcluster.Node) string {
	t.Helper()
	known := map[string]bool{n.RaftAddr: true, n.APIAddr: true, n.HTTPAddr: true, strings.TrimPrefix(n.OPCUA, "opc.tcp://"): true}
	var others []string
	for _, addr := range listening(t, n.PID()) {
		if !known[addr] {
			others = append(others, addr)
		}
	}
	if len(others) != 1 {
		t.Fatalf("%s listens on %v besides its configured addresses, want only the library's port", n.ID, others)
	}
	return others[0]
}

// listening lists the IPv4 TCP addresses process pid listens on, from
// /proc: its socket inodes matched with /proc/net/tcp's LISTEN rows.
func listening(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("sockets of pid %d: %v", pid, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
			continue
		}
		hexIP, hexPort, ok := strings.Cut(fields[1], ":")
		ip, err1 := strconv.ParseUint(hexIP, 16, 32)
		port, err2 := strconv.ParseUint(hexPort, 16, 16)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("/proc/net/tcp row %q", sc.Text())
		}
		// The address is in host (little-endian) byte order.
		addr := net.IPv4(byte(ip), byte(ip>>8), byte(ip>>16), byte(ip>>24))
		out = append(out, net.JoinHostPort(addr.String(), strconv.Itoa(int(port))))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
