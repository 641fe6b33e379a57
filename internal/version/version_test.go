package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.0", Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "3f2a9c1b0d4e5f60718293a4b5c6d7e8f9012345"},
		{Key: "vcs.modified", Value: "true"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
	}}
	for _, tc := range []struct {
		name  string
		stamp string
		bi    *debug.BuildInfo
		want  string
		rev   string
	}{
		{"release", "v0.2.0", vcs, "v0.2.0", "3f2a9c1b0d4e5f60718293a4b5c6d7e8f9012345"},
		{"vcs", "", vcs, Development + "+3f2a9c1b0d4e.dirty", "3f2a9c1b0d4e5f60718293a4b5c6d7e8f9012345"},
		{"buildvcs=false", "", &debug.BuildInfo{GoVersion: "go1.26.0"}, Development, ""},
		{"no build info", "", nil, Development, ""},
	} {
		got := from(tc.stamp, tc.bi)
		if got.Version != tc.want || got.Revision != tc.rev {
			t.Errorf("%s: got %+v, want version %q revision %q", tc.name, got, tc.want, tc.rev)
		}
		if got.GoVersion == "" {
			t.Errorf("%s: no Go version", tc.name)
		}
	}
	if s := from("", &debug.BuildInfo{GoVersion: "go1.26.0"}).String(); !strings.Contains(s, "revision unknown") {
		t.Errorf("String() = %q, want it to say the revision is unknown", s)
	}
	if got := from("", vcs); got.Time.IsZero() {
		t.Error("vcs.time not read")
	}
}
