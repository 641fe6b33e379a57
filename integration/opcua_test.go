package integration

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	gopcua "github.com/gopcua/opcua"
	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/opcua"
)

// uaClient connects an anonymous, unsecured gopcua client to endpoint.
func uaClient(t *testing.T, endpoint string, opts ...gopcua.Option) *gopcua.Client {
	t.Helper()
	c, err := gopcua.NewClient(endpoint, append([]gopcua.Option{gopcua.SecurityMode(ua.MessageSecurityModeNone), gopcua.AuthAnonymous(),
		gopcua.AutoReconnect(false), gopcua.RequestTimeout(3 * time.Second), gopcua.DialTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func readValue(c *gopcua.Client, node *ua.NodeID) (*ua.DataValue, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := c.Read(ctx, &ua.ReadRequest{NodesToRead: []*ua.ReadValueID{{NodeID: node, AttributeID: ua.AttributeIDValue}}})
	if err != nil {
		return nil, err
	}
	return resp.Results[0], nil
}

// probeClient connects a short-lived anonymous client for a polled check;
// nil when the server does not answer. The caller closes it.
func probeClient(ctx context.Context, endpoint string) *gopcua.Client {
	c, err := gopcua.NewClient(endpoint, gopcua.SecurityMode(ua.MessageSecurityModeNone), gopcua.AuthAnonymous(),
		gopcua.AutoReconnect(false), gopcua.RequestTimeout(time.Second), gopcua.DialTimeout(time.Second))
	if err != nil {
		return nil
	}
	if err := c.Connect(ctx); err != nil {
		return nil
	}
	return c
}

// serviceLevel reads Server.ServiceLevel; -1 when the node does not answer.
func serviceLevel(endpoint string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := probeClient(ctx, endpoint)
	if c == nil {
		return -1
	}
	defer c.Close(context.Background())
	dv, err := readValue(c, ua.NewNumericNodeID(0, id.Server_ServiceLevel))
	if err != nil || dv.Status != ua.StatusOK {
		return -1
	}
	v, ok := dv.Value.Value().(byte)
	if !ok {
		return -1
	}
	return int(v)
}

// waitGoodChanging waits until node reads Good on c with a value different
// from the first Good value it read: live values flowing.
func waitGoodChanging(t *testing.T, c *gopcua.Client, node *ua.NodeID, timeout time.Duration, what string) {
	t.Helper()
	var first any
	testwait.For(t, timeout, what, func() bool {
		dv, err := readValue(c, node)
		if err != nil || dv.Status != ua.StatusOK || dv.Value == nil {
			return false
		}
		if first == nil {
			first = dv.Value.Value()
			return false
		}
		return dv.Value.Value() != first
	})

}

func writeDouble(t *testing.T, c *gopcua.Client, node *ua.NodeID, v float64) ua.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Write(ctx, &ua.WriteRequest{NodesToWrite: []*ua.WriteValue{{
		NodeID: node, AttributeID: ua.AttributeIDValue,
		Value: &ua.DataValue{EncodingMask: ua.DataValueValue, Value: ua.MustVariant(v)},
	}}})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	return resp.Results[0]
}

func siteNode(t *testing.T, c *gopcua.Client, name string) *ua.NodeID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ns, err := c.FindNamespace(ctx, "urn:test:scadad")
	if err != nil {
		t.Fatalf("find the site namespace: %v", err)
	}
	return ua.NewStringNodeID(ns, name)
}

// opcuaPair starts a gateway simulator (with simArgs) and two voters and
// a witness whose voters serve OPC UA, and returns them with the Active
// and the other voter.
func opcuaPair(t *testing.T, simArgs ...string) (sim *testcluster.Sim, c *testcluster.Cluster, active, standby *testcluster.Node) {
	t.Helper()
	sim = startSim(t, simArgs...)
	c = newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, OPCUA: true, LogLevel: "info"})
	start(t, c)
	active = waitOneActive(t, c, 20*time.Second)
	return sim, c, active, otherVoter(t, c, active)
}

// waitRedundancyLevels waits for ServiceLevel 250 on active and 240 on
// standby.
func waitRedundancyLevels(t *testing.T, active, standby *testcluster.Node, when string) {
	t.Helper()
	testwait.For(t, 20*time.Second, "ServiceLevel 250 on the Active and 240 on the Standby"+when, func() bool {
		return serviceLevel(active.OPCUA) == 250 && serviceLevel(standby.OPCUA) == 240
	})

}

func TestOPCUARedundancyFailoverAndWriteGate(t *testing.T) {
	sim, c, active, standby := opcuaPair(t, "-change", "100ms")
	// A subscribe backoff floor far beyond every wait below: a worker that
	// starts before its gateway session is open (each time a node becomes
	// Active) must subscribe as soon as the session is good, not wait out
	// the floor.
	site := testcluster.SiteConfigGateway("ua", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5)
	site = bytes.Replace(site, []byte("      endpoint: "+sim.Addr+"\n"), []byte("      endpoint: "+sim.Addr+"\n      backoff_floor: 60s\n      backoff_max: 120s\n"), 1)
	if !bytes.Contains(site, []byte("backoff_floor: 60s")) {
		t.Fatal("site config template changed: no mxaccess endpoint line to add the backoff to")
	}
	deploySite(t, c, site)

	waitRedundancyLevels(t, active, standby, "")

	var pick struct {
		Picked string `json:"picked"`
	}
	ctlJSON(t, c, nil, &pick, "opcua", "pick", standby.OPCUA+","+active.OPCUA)
	if pick.Picked != active.OPCUA {
		t.Fatalf("scadactl opcua pick chose %q, want the Active's %s", pick.Picked, active.OPCUA)
	}

	// Live values from the simulator through the Active's subscribe workers.
	ac := uaClient(t, active.OPCUA)
	speed := siteNode(t, ac, "Pump1.Speed")
	waitGoodChanging(t, ac, speed, 20*time.Second, "a good, changing Pump1.Speed on the Active")

	// The write gate: refused on the Standby, forwarded to the gateway on
	// the Active.
	before, err := sim.Stats()
	if err != nil {
		t.Fatal(err)
	}
	sc := uaClient(t, standby.OPCUA)
	if st := writeDouble(t, sc, siteNode(t, sc, "Pump1.SpeedSP"), 42); st == ua.StatusOK {
		t.Fatal("the Standby accepted a device write")
	}
	if st := writeDouble(t, ac, siteNode(t, ac, "Pump1.SpeedSP"), 42); st != ua.StatusOK {
		t.Fatalf("the Active refused a device write: %v", st)
	}
	after, _ := sim.Stats()
	if after.Commands["Write"]+after.Commands["write"] <= before.Commands["Write"]+before.Commands["write"] {
		t.Fatalf("the Active's write did not reach the gateway: commands before %v, after %v", before.Commands, after.Commands)
	}
	if after.StaleEpochWrites != 0 {
		t.Fatalf("the gateway saw %d writes with a stale epoch", after.StaleEpochWrites)
	}

	// SIGKILL the Active: the survivor advertises 250 and serves live values.
	killed := time.Now()
	c.Kill(active)
	testwait.For(t, 15*time.Second, "the survivor's ServiceLevel 250", func() bool { return serviceLevel(standby.OPCUA) == 250 })
	t.Logf("survivor advertised 250 %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	speed2 := siteNode(t, sc, "Pump1.Speed")
	waitGoodChanging(t, sc, speed2, 20*time.Second, "changing values on the survivor")

	// Boot window: a lone voter of a three-voter cluster has no quorum; its
	// role is unknown and a write must be refused.
	for _, n := range c.Nodes {
		c.Kill(n)
	}
	start(t, c, active)
	testwait.For(t, 20*time.Second, active.ID+"'s OPC UA server back without quorum", func() bool { return serviceLevel(active.OPCUA) >= 0 })
	lone := uaClient(t, active.OPCUA)
	if st := writeDouble(t, lone, siteNode(t, lone, "Pump1.SpeedSP"), 7); st == ua.StatusOK {
		t.Fatal("a write was accepted in the boot window of a multi-voter cluster")
	}
	if lvl := serviceLevel(active.OPCUA); lvl != 0 {
		t.Fatalf("a node without quorum advertises ServiceLevel %d, want 0", lvl)
	}
}

// TestPlannedStopTellsOPCUAClientsFirst: a node stopped on purpose
// (SIGTERM: a patch, a VM move) publishes ServiceLevel 0 to its subscribed
// clients before it goes, so they move to the other node at once instead of
// finding out from a dead connection; and a client that stays connected
// does not hold the stop up (the OPC UA library waits 10 s for it).
func TestPlannedStopTellsOPCUAClientsFirst(t *testing.T) {
	sim, c, active, standby := opcuaPair(t, "-change", "100ms")
	deploySite(t, c, testcluster.SiteConfigGateway("stop", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	waitRedundancyLevels(t, active, standby, "")

	out := &lockedbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan error, 1)
	go func() {
		watched <- opcua.Watch(ctx, []string{active.OPCUA, standby.OPCUA}, "ns=2;s=Pump1.Speed", out)
	}()
	t.Cleanup(func() {
		cancel()
		<-watched
		if t.Failed() {
			t.Logf("watch output:\n%s", out.String())
		}
	})
	testwait.For(t, 20*time.Second, "the watch on the Active, its value changing", func() bool {
		got := out.String()
		return strings.Contains(got, active.OPCUA+" ServiceLevel 250") && strings.Count(got, active.OPCUA+" ns=2;s=Pump1.Speed = ") >= 3
	})

	stopped := time.Now()
	c.Stop(active)
	took := time.Since(stopped)
	t.Logf("the Active stopped in %v with an OPC UA client subscribed", took.Round(time.Millisecond))
	if took > 8*time.Second {
		t.Errorf("stopping the Active took %v with an OPC UA client connected", took.Round(time.Millisecond))
	}
	testwait.For(t, 20*time.Second, "the watch to leave the stopped node", func() bool {
		return strings.Contains(out.String(), "leaving "+active.OPCUA)
	})

	if got := out.String(); !strings.Contains(got, "leaving "+active.OPCUA+": ServiceLevel dropped 250 -> 0") {
		t.Fatalf("the client did not hear ServiceLevel 0 before the node went:\n%s", got)
	}
}

// TestGatewayOutageShowsOnTheActive: with the gateway gone the Active's
// status must not go on saying its instances are subscribed (an operator
// and the subscription alert read it), and its OPC UA values turn Bad; when
// the gateway is back, so is the data.
func TestGatewayOutageShowsOnTheActive(t *testing.T) {
	sim, c, active, _ := opcuaPair(t, "-change", "100ms")
	deploySite(t, c, testcluster.SiteConfigGateway("ua", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	gateway := func() *controlpb.DataConnectionStatus {
		var st controlpb.StatusResponse
		if err := c.CtlJSON(ctx, []*testcluster.Node{active}, &st, "status"); err != nil {
			return nil
		}
		for _, dc := range st.Connections {
			if dc.Name == "gw" {
				return dc
			}
		}
		return nil
	}
	testwait.For(t, 20*time.Second, "the gateway connection up on the Active", func() bool {
		dc := gateway()
		return dc != nil && dc.Up && strings.HasPrefix(dc.Detail, "1/1")
	})

	testwait.For(t, 20*time.Second, "ServiceLevel 250 on the Active", func() bool { return serviceLevel(active.OPCUA) == 250 })
	ac := uaClient(t, active.OPCUA)
	speed := siteNode(t, ac, "Pump1.Speed")
	waitGoodChanging(t, ac, speed, 20*time.Second, "a good, changing Pump1.Speed on the Active")
	sim.Close()
	testwait.For(t, 20*time.Second, "the Active's status showing the gateway connection down", func() bool {
		dc := gateway()
		return dc != nil && !dc.Up && strings.HasPrefix(dc.Detail, "0/1")
	})

	if dv, err := readValue(ac, speed); err != nil || dv.Status == ua.StatusOK {
		t.Fatalf("Pump1.Speed with the gateway gone: %v, %v; want a Bad quality", dv, err)
	}
}

// TestOPCUAServerFollowsADeployThatChangesIt: a deploy that changes the
// server's own options (here its namespace) restarts the OPC UA server on
// every node, which then serves the new namespace with the right
// ServiceLevel, and the values it had: the gateway sends a value when it is
// advised and then only when it changes, and these never do. The same after
// the first deploy and after a restart of every node.
func TestOPCUAServerFollowsADeployThatChangesIt(t *testing.T) {
	sim, c, active, standby := opcuaPair(t, "-change", "0")
	site := testcluster.SiteConfigGateway("ns", sim.Addr, map[string]string{"sink": "http://127.0.0.1:9/x"}, 5)
	deploySite(t, c, site)
	waitRedundancyLevels(t, active, standby, "")
	testwait.For(t, 20*time.Second, "a Good Pump1.Speed on the Active", func() bool {
		return goodValue(active.OPCUA, "urn:test:scadad", "Pump1.Speed")
	})

	changed := bytes.Replace(site, []byte("namespace_uri: urn:test:scadad\n"), []byte("namespace_uri: urn:test:scadad:v2\n"), 1)
	if bytes.Equal(changed, site) {
		t.Fatal("site config template changed: no namespace_uri line to change")
	}
	deploySite(t, c, changed)
	for _, n := range []*testcluster.Node{active, standby} {
		testwait.For(t, 20*time.Second, n.ID+" serving the new namespace", func() bool {
			return hasNamespace(n.OPCUA, "urn:test:scadad:v2")
		})

	}
	waitRedundancyLevels(t, active, standby, " after the restart")
	testwait.For(t, 10*time.Second, "the unchanging Pump1.Speed Good again on the restarted Active", func() bool {
		return goodValue(active.OPCUA, "urn:test:scadad:v2", "Pump1.Speed")
	})

	// The whole site restarts: each node builds its server and workers from
	// its replicated copy of the site, side by side, and the value that
	// never changes must reach the new Active's address space all the same.
	for _, n := range c.Nodes {
		c.Kill(n)
	}
	start(t, c)
	again := waitOneActive(t, c, 20*time.Second)
	testwait.For(t, 20*time.Second, "the unchanging Pump1.Speed Good on "+again.ID+" after a restart of every node", func() bool {
		return goodValue(again.OPCUA, "urn:test:scadad:v2", "Pump1.Speed")
	})

}

// goodValue reports whether the server at endpoint reads node name of the
// namespace nsURI as Good.
func goodValue(endpoint, nsURI, name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := probeClient(ctx, endpoint)
	if c == nil {
		return false
	}
	defer c.Close(context.Background())
	ns, err := c.FindNamespace(ctx, nsURI)
	if err != nil {
		return false
	}
	dv, err := readValue(c, ua.NewStringNodeID(ns, name))
	return err == nil && dv.Status == ua.StatusOK
}

// hasNamespace reports whether the server at endpoint lists uri in its
// NamespaceArray.
func hasNamespace(endpoint, uri string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := probeClient(ctx, endpoint)
	if c == nil {
		return false
	}
	defer c.Close(context.Background())
	ns, err := c.NamespaceArray(ctx)
	return err == nil && slices.Contains(ns, uri)
}
