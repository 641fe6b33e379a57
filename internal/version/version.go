// Package version says which build of scadad is running: the release
// stamped at link time, else the VCS revision Go recorded, else that it is
// an unstamped development build. It must not read anything but the
// binary's own build information.
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Development is the version of a build no release stamped: the next
// release, as a semantic-version pre-release.
const Development = "v0.2.0-dev"

// stamped is set for a release by the linker:
//
//	go build -ldflags "-X github.com/scadad/scadad/internal/version.stamped=v0.2.0"
//
// It is the one package-level variable a release build writes; nothing
// at run time does.
var stamped string

// Info describes the running build.
type Info struct {
	// Version is the release (v0.2.0) or Development plus the short
	// revision (v0.2.0-dev+3f2a9c1b0d4e), or Development alone when the
	// build recorded no revision (go build -buildvcs=false, as CI does).
	Version string
	// Revision is the VCS commit, "" when unknown; Modified says the work
	// tree had uncommitted changes.
	Revision string
	Modified bool
	// Time is the commit time recorded by the VCS, zero when unknown.
	Time      time.Time
	GoVersion string
}

// Get reads the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(stamped, bi)
}

// from is Get for given inputs (bi may be nil).
func from(stamp string, bi *debug.BuildInfo) Info {
	info := Info{GoVersion: runtime.Version()}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			case "vcs.time":
				info.Time, _ = time.Parse(time.RFC3339, s.Value)
			}
		}
	}
	switch {
	case stamp != "":
		info.Version = stamp
	case info.Revision != "":
		info.Version = Development + "+" + short(info.Revision)
		if info.Modified {
			info.Version += ".dirty"
		}
	default:
		info.Version = Development
	}
	return info
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// String is the one-line form `scadad --version` prints.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	if i.Revision != "" {
		b.WriteString(" (revision " + i.Revision)
		if i.Modified {
			b.WriteString(", modified")
		}
		b.WriteString(")")
	} else {
		b.WriteString(" (revision unknown: built without VCS stamping)")
	}
	b.WriteString(" " + i.GoVersion)
	return b.String()
}
