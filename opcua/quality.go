package opcua

import "github.com/gopcua/opcua/ua"

// isGood says whether code's severity is Good.
func isGood(code ua.StatusCode) bool { return uint32(code)>>30 == 0 }
