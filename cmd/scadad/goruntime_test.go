package main

import (
	"math"
	"testing"

	"github.com/scadad/scadad/nodeconfig"
)

func TestCollectorSettingsFor(t *testing.T) {
	tests := []struct {
		name      string
		rt        nodeconfig.Runtime
		env       map[string]string
		wantGC    int
		wantLimit int64
	}{
		{"config", nodeconfig.Runtime{GCPercent: 400, MemoryLimitMiB: 80}, nil, 400, 80 << 20},
		{"no limit", nodeconfig.Runtime{GCPercent: 200, MemoryLimitMiB: -1}, nil, 200, math.MaxInt64},
		{"GOGC wins", nodeconfig.Runtime{GCPercent: 400, MemoryLimitMiB: 80}, map[string]string{"GOGC": "100"}, 0, 80 << 20},
		{"GOMEMLIMIT wins", nodeconfig.Runtime{GCPercent: 400, MemoryLimitMiB: 80}, map[string]string{"GOMEMLIMIT": "1GiB"}, 400, 0},
		{"both from the environment", nodeconfig.Runtime{GCPercent: 400, MemoryLimitMiB: 80}, map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := collectorSettingsFor(tt.rt, func(k string) string { return tt.env[k] })
			if s.GCPercent != tt.wantGC || s.MemoryLimit != tt.wantLimit {
				t.Errorf("got gc %d limit %d, want gc %d limit %d", s.GCPercent, s.MemoryLimit, tt.wantGC, tt.wantLimit)
			}
		})
	}
}
