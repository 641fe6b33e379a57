package opcua

import (
	"testing"
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/ua"
)

// TestBuildInfo: BuildInfo names the running scadad, in its variables and
// in the ServerStatus structure (the library says 0.0.0-dev there).
func TestBuildInfo(t *testing.T) {
	date := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ts := startServer(t, activeState(), func(c *Config) {
		c.Build = BuildInfo{SoftwareVersion: "v0.2.0", BuildNumber: "3f2a9c1b0d4e", BuildDate: date}
	})
	c := connect(t, ts.Endpoint())
	for nid, want := range map[uint32]any{
		id.Server_ServerStatus_BuildInfo_ProductName:     "scadad",
		id.Server_ServerStatus_BuildInfo_SoftwareVersion: "v0.2.0",
		id.Server_ServerStatus_BuildInfo_BuildNumber:     "3f2a9c1b0d4e",
		id.Server_ServerStatus_BuildInfo_BuildDate:       date,
	} {
		dv := readValue(t, c, ua.NewNumericNodeID(0, nid), ua.AttributeIDValue)
		if got := dv.Value.Value(); got != want {
			t.Errorf("i=%d = %v (%T), want %v", nid, got, got, want)
		}
	}
	dv := readValue(t, c, ua.NewNumericNodeID(0, id.Server_ServerStatus), ua.AttributeIDValue)
	eo, ok := dv.Value.Value().(*ua.ExtensionObject)
	if !ok {
		t.Fatalf("ServerStatus = %T", dv.Value.Value())
	}
	st, ok := eo.Value.(*ua.ServerStatusDataType)
	if !ok || st.BuildInfo == nil || st.BuildInfo.SoftwareVersion != "v0.2.0" || st.BuildInfo.BuildNumber != "3f2a9c1b0d4e" {
		t.Fatalf("ServerStatus.BuildInfo = %+v", st)
	}
}
