package opcua

import (
	"testing"

	"github.com/gopcua/opcua/ua"
)

func TestSmokeReadServiceLevel(t *testing.T) {
	ts := startServer(t, activeState(), nil)
	c := connect(t, ts.Endpoint())
	dv := readValue(t, c, serviceLevelID, ua.AttributeIDValue)
	t.Logf("status=%v value=%v", dv.Status, dv.Value)
	dv = readValue(t, c, ts.NodeID("Pump1", "Speed"), ua.AttributeIDValue)
	t.Logf("status=%v value=%v", dv.Status, dv.Value)
	t.Logf("session timeout %v", c.Session().RevisedTimeout())
}
