package integration

import (
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// An OPC UA server that could not start when a deploy reached its node (its
// port held by another process for a while) starts once the port is free,
// without another deploy: the node must not stay without an endpoint until
// someone deploys again.
func TestOPCUAServerStartsOnceItsPortIsFree(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, OPCUA: true, LogLevel: "info"})
	var node *testcluster.Node
	for _, n := range c.Nodes {
		if n.OPCUA != "" {
			node = n
			break
		}
	}
	u, err := url.Parse(node.OPCUA)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatalf("hold %s's OPC UA port: %v", node.ID, err)
	}
	defer holder.Close()
	start(t, c)
	waitOneActive(t, c, 20*time.Second)
	deploySite(t, c, testcluster.SiteConfig("ua-restart", map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	testwait.For(t, 20*time.Second, node.ID+" logging that its OPC UA server did not start", func() bool {
		return strings.Contains(node.LogTail(400), "OPC UA server not started")
	})

	holder.Close()
	testwait.For(t, 30*time.Second, node.ID+"'s OPC UA server answering once its port is free", func() bool {
		return serviceLevel(node.OPCUA) >= 0
	})
}
