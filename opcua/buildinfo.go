package opcua

import (
	"time"

	"github.com/gopcua/opcua/server"
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
// before Start, like installRedundancyNodes; the variables that show the
// structure's fields are installServerObject's.
func (s *Server) installBuildInfo(srv *server.Server) error {
	b := s.cfg.Build
	b.SoftwareVersion = s.softwareVersion()
	// Status returns a copy whose BuildInfo points at the library's own:
	// the one seam to the structure ServerStatus (i=2256) serves.
	if bi := srv.Status().BuildInfo; bi != nil {
		bi.ProductURI = "urn:scadad"
		bi.SoftwareVersion = b.SoftwareVersion
		bi.BuildNumber = b.BuildNumber
		bi.BuildDate = b.BuildDate
	}
	return nil
}

// softwareVersion is the release the server says it runs.
func (s *Server) softwareVersion() string {
	if v := s.cfg.Build.SoftwareVersion; v != "" {
		return v
	}
	return "unknown"
}
