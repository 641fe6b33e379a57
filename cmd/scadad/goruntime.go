package main

import (
	"math"
	"runtime/debug"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/nodeconfig"
)

// collectorSettings is how the daemon's garbage collector is tuned. A
// value the operator set in the environment (GOGC, GOMEMLIMIT) has already
// been applied by the Go runtime and is left alone.
type collectorSettings struct {
	GCPercent   int   // 0: left to GOGC
	MemoryLimit int64 // bytes; 0: left to GOMEMLIMIT; math.MaxInt64: none
	envGOGC     string
	envLimit    string
}

// collectorSettingsFor decides the collector settings from the node
// config, except for what GOGC or GOMEMLIMIT set.
func collectorSettingsFor(rt nodeconfig.Runtime, getenv func(string) string) collectorSettings {
	s := collectorSettings{envGOGC: getenv("GOGC"), envLimit: getenv("GOMEMLIMIT")}
	if s.envGOGC == "" {
		s.GCPercent = rt.GCPercent
	}
	if s.envLimit == "" {
		s.MemoryLimit = math.MaxInt64
		if rt.MemoryLimitMiB > 0 {
			s.MemoryLimit = int64(rt.MemoryLimitMiB) << 20
		}
	}
	return s
}

// apply sets the decided values on this process's runtime and logs them.
func (s collectorSettings) apply(log zerolog.Logger) {
	gc, limit := "GOGC="+s.envGOGC, "GOMEMLIMIT="+s.envLimit
	if s.GCPercent != 0 {
		debug.SetGCPercent(s.GCPercent)
		gc = strconv.Itoa(s.GCPercent)
	}
	switch s.MemoryLimit {
	case 0:
	case math.MaxInt64:
		debug.SetMemoryLimit(s.MemoryLimit)
		limit = "none"
	default:
		debug.SetMemoryLimit(s.MemoryLimit)
		limit = strconv.FormatInt(s.MemoryLimit>>20, 10) + " MiB"
	}
	log.Info().Str("gc_percent", gc).Str("memory_limit", limit).Msg("go runtime collector")
}
