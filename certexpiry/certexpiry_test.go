package certexpiry

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/lockedbuf"
	"github.com/scadad/scadad/pki"
)

func TestWatchSaysWhenACertificateLapses(t *testing.T) {
	now := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	far := now.Add(400 * 24 * time.Hour)
	cases := []struct {
		name     string
		validity pki.Validity
		want     []string // substrings of the lines logged, in order
	}{
		{"both far off", pki.Validity{Cert: far, CA: far}, nil},
		{"node certificate in 10 days", pki.Validity{Cert: now.Add(10*24*time.Hour + time.Hour), CA: far},
			[]string{`"level":"warn"`, `"days_left":10`, "node certificate expires soon", "scadactl certs issue"}},
		{"site CA expired", pki.Validity{Cert: far, CA: now.Add(-time.Hour)},
			[]string{`"level":"error"`, "site CA has expired", "scadactl certs init --overwrite"}},
		{"node certificate a day past the warning", pki.Validity{Cert: now.Add(31 * 24 * time.Hour), CA: far}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf lockedbuf.Buffer
			Watch{Validity: tc.validity, Now: func() time.Time { return now }, Log: zerolog.New(&buf)}.Check()
			out := buf.String()
			if len(tc.want) == 0 {
				if out != "" {
					t.Fatalf("logged %q, want nothing", out)
				}
				return
			}
			if strings.Count(out, "\n") != 1 {
				t.Fatalf("logged %q, want one line", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("log line %q lacks %q", out, w)
				}
			}
		})
	}
}
