package integration

import (
	"encoding/binary"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// TestOPCUAConnectionsBoundedPerAddress: one client address opens many
// OPC UA connections (each with a Hello, so the server holds them): only
// opcua.max_connections_per_address of them are kept, the rest are reset
// as accepted and counted, and once the client closes its connections it
// may connect again.
func TestOPCUAConnectionsBoundedPerAddress(t *testing.T) {
	const perAddr, tries = 6, 30
	sim := startSim(t)
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, OPCUA: true, LogLevel: "info",
		Extra: "opcua:\n  max_connections: 40\n  max_connections_per_address: " + strconv.Itoa(perAddr) + "\n"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	standby := otherVoter(t, c, active)
	deploySite(t, c, testcluster.SiteConfigGateway("connlimit", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	waitRedundancyLevels(t, active, standby, "")

	u, err := url.Parse(active.OPCUA)
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	acked, refused := 0, 0
	for range tries {
		conn, ok := helloConn(u.Host, active.OPCUA)
		if ok {
			acked++
			held = append(held, conn)
		} else {
			refused++
		}
	}
	t.Logf("%d connections from one address: %d answered, %d refused", tries, acked, refused)
	if acked != perAddr {
		t.Errorf("%d connections from one address were answered, want the bound %d", acked, perAddr)
	}
	want := strconv.Itoa(tries - perAddr)
	testwait.For(t, 10*time.Second, "the refusals counted per address", func() bool {
		return metricLine(active, `scadad_opcua_connections_refused_total{reason="per_address"}`) == want
	})
	// The server still serves: ServiceLevel is read on a connection of
	// its own once the held ones are gone.
	for _, c := range held {
		c.Close()
	}
	held = nil
	testwait.For(t, 10*time.Second, "a new connection from the same address to be answered", func() bool {
		conn, ok := helloConn(u.Host, active.OPCUA)
		if ok {
			conn.Close()
		}
		return ok
	})
	if lvl := serviceLevel(active.OPCUA); lvl != 250 {
		t.Errorf("ServiceLevel %d on the Active after the flood, want 250", lvl)
	}
}

// helloConn dials addr and sends a Hello; it reports whether the server
// answered with an Acknowledge, and returns the open connection if so.
func helloConn(addr, endpoint string) (net.Conn, bool) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return nil, false
	}
	c.SetDeadline(time.Now().Add(3 * time.Second))
	hello := make([]byte, 0, 64)
	for _, v := range []uint32{0, 65536, 65536, 0, 0, uint32(len(endpoint))} {
		hello = binary.LittleEndian.AppendUint32(hello, v)
	}
	if _, err := c.Write(uacpFrame("HELF", append(hello, endpoint...))); err != nil {
		c.Close()
		return nil, false
	}
	buf := make([]byte, 4096)
	if n, err := c.Read(buf); err != nil || n < 4 || string(buf[:4]) != "ACKF" {
		c.Close()
		return nil, false
	}
	c.SetDeadline(time.Time{})
	return c, true
}
