package opcua

import (
	"time"

	"github.com/gopcua/opcua/id"
	"github.com/gopcua/opcua/server"
	"github.com/gopcua/opcua/ua"
)

// BuildInfo is the build the server describes in
// Server.ServerStatus.BuildInfo (ProductName is always "scadad").
type BuildInfo struct {
	SoftwareVersion string // the release, e.g. v0.2.0
	BuildNumber     string // the VCS revision, "" when unknown
	BuildDate       time.Time
}

// installBuildInfo makes BuildInfo say which scadad runs: the library
// reports SoftwareVersion "0.0.0-dev" in the ServerStatus structure
// whatever its option says, the software version again as BuildNumber,
// and its own start time as BuildDate (opcua/WORKAROUNDS.md). It runs
// before Start, like installRedundancyNodes.
func (s *Server) installBuildInfo(srv *server.Server) error {
	n0, err := ns0(srv)
	if err != nil {
		return err
	}
	b := s.cfg.Build
	if b.SoftwareVersion == "" {
		b.SoftwareVersion = "unknown"
	}
	// Status returns a copy whose BuildInfo points at the library's own:
	// the one seam to the structure ServerStatus (i=2256) serves.
	if bi := srv.Status().BuildInfo; bi != nil {
		bi.ProductURI = "urn:scadad"
		bi.SoftwareVersion = b.SoftwareVersion
		bi.BuildNumber = b.BuildNumber
		bi.BuildDate = b.BuildDate
	}
	for _, v := range []struct {
		node  uint32
		name  string
		value any
	}{
		{id.Server_ServerStatus_BuildInfo_ProductURI, "ProductUri", "urn:scadad"},
		{id.Server_ServerStatus_BuildInfo_BuildNumber, "BuildNumber", b.BuildNumber},
		{id.Server_ServerStatus_BuildInfo_BuildDate, "BuildDate", b.BuildDate},
	} {
		value := v.value
		n0.AddNode(server.NewNode(ua.NewNumericNodeID(0, v.node), server.Attributes{
			ua.AttributeIDNodeClass:   server.DataValueFromValue(uint32(ua.NodeClassVariable)),
			ua.AttributeIDBrowseName:  server.DataValueFromValue(&ua.QualifiedName{Name: v.name}),
			ua.AttributeIDDisplayName: server.DataValueFromValue(localized(v.name)),
		}, nil, func() *ua.DataValue { return server.DataValueFromValue(value) }))
	}
	return nil
}
