package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// A message the receiver refuses for good (400) is parked at once, with the
// answer recorded and counted, and the target moves on; an operator's
// retry delivers it once the receiver takes it. A 503 with Retry-After: 2
// is retried after 2 s, not after the target's 20 ms backoff. With
// max_attempts 0 (never park by count), as a new user has it.
func TestSFPoisonMessageParksAtOnceAndRetryAfterIsHonoured(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	waitOneActive(t, c, 20*time.Second)
	poison := startSink(t, "-fail-first", "1", "-status", "400")
	later := startSink(t, "-fail-first", "1", "-status", "503", "-retry-after", "2")
	deploySite(t, c, testcluster.SiteConfig("sf-poison", map[string]string{"poison": poison.URL, "later": later.URL}, 0))
	active := waitOneActive(t, c, 10*time.Second)

	for _, id := range []string{"bad-1", "good-2"} {
		if !enqueue(active, "poison", id, []byte(id)) {
			t.Fatalf("enqueue %s not acknowledged", id)
		}
	}
	waitDelivered(t, poison, map[string]bool{"good-2": true}, 20*time.Second)
	reqs, err := poison.Requests()
	if err != nil {
		t.Fatal(err)
	}
	var tries []int
	for _, r := range reqs {
		if r.ID == "bad-1" {
			tries = append(tries, r.Status)
		}
	}
	if len(tries) != 1 || tries[0] != 400 {
		t.Fatalf("bad-1 was sent %d times (%v); a 400 must park it after the first", len(tries), tries)
	}
	var parked []*controlpb.SFMessage
	testwait.For(t, 10*time.Second, "sf list --parked showing bad-1", func() bool {
		parked = nil
		ctlJSON(t, c, nil, &parked, "sf", "list", "--parked", "--target", "poison")
		return len(parked) == 1
	})
	if p := parked[0]; p.Id != "bad-1" || p.Attempts != 1 || !strings.Contains(p.ParkReason, "400") || !strings.Contains(p.LastError, "400") {
		t.Fatalf("parked %+v; want bad-1 after 1 attempt with the 400 answer", p)
	}
	out, errs, code, err := c.Ctl(t.Context(), nil, "sf", "list", "--parked", "--target", "poison")
	if err != nil || code != 0 || !strings.Contains(out, "LAST ERROR") || !strings.Contains(out, "target answered 400") {
		t.Fatalf("sf list --parked: exit %d %v\n%s%s", code, err, out, errs)
	}
	if v := metricLine(active, `scadad_sf_parked_total{reason="refused",target="poison"}`); v != "1" {
		t.Fatalf(`scadad_sf_parked_total{reason="refused",target="poison"} = %q on the Active, want 1`, v)
	}

	var res controlpb.SFSelectResponse
	ctlJSON(t, c, nil, &res, "sf", "retry", "bad-1")
	if res.Affected != 1 {
		t.Fatalf("retry affected %d", res.Affected)
	}
	waitDelivered(t, poison, map[string]bool{"bad-1": true}, 20*time.Second)

	if !enqueue(active, "later", "slow-1", []byte("slow-1")) {
		t.Fatal("enqueue slow-1 not acknowledged")
	}
	waitDelivered(t, later, map[string]bool{"slow-1": true}, 20*time.Second)
	reqs, err = later.Requests()
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].Status != 503 || reqs[1].Status != 200 {
		t.Fatalf("requests to the 503 target: %+v", reqs)
	}
	if gap := reqs[1].Time.Sub(reqs[0].Time); gap < 2*time.Second || gap > 5*time.Second {
		t.Fatalf("retried %v after a 503 with Retry-After: 2, want about 2 s", gap)
	}
	t.Logf("retried %v after Retry-After: 2", reqs[1].Time.Sub(reqs[0].Time))

	// sf targets: every target with its kind, endpoint and state.
	var targets []*controlpb.SFTargetStats
	testwait.For(t, 10*time.Second, "sf targets showing both targets idle", func() bool {
		targets = nil
		ctlJSON(t, c, nil, &targets, "sf", "targets")
		return len(targets) == 2 && targets[0].State == "idle" && targets[1].State == "idle"
	})
	if tg := targets[1]; tg.Target != "poison" || tg.Kind != "http" || tg.Endpoint != poison.URL || tg.MaxInFlight != 1 || tg.BatchMaxMessages != 1 {
		t.Fatalf("sf targets: %+v", tg)
	}
}
