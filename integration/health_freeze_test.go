package integration

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
)

// TestHealthActiveAfterAShortFreeze: the Active is frozen (SIGSTOP) for
// less than the heartbeat timeout and resumes still the leader in the same
// term. Its /health/active must not answer 503 once it runs again: its
// last quorum confirmation is stale, and it confirms afresh before it
// answers instead of answering 503 until its next periodic confirmation.
// A trial where raft's leader lease made it step down (and win again in a
// new term) is not counted: there was no leader for a moment, and 503 was
// the truth.
func TestHealthActiveAfterAShortFreeze(t *testing.T) {
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	health := func() (int, string) {
		resp, err := client.Get("http://" + active.HTTPAddr + "/health/active")
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		var h struct {
			Epoch string `json:"epoch"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&h)
		return resp.StatusCode, h.Epoch
	}
	polls, bad, trials := 0, 0, 0
	for trial := range 10 {
		_, before := health()
		c.Pause(active)
		time.Sleep(200 * time.Millisecond) // the freeze itself: shorter than the heartbeat timeout (500 ms)
		c.Resume(active)
		var codes []int
		sameTerm := true
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			code, epoch := health()
			codes = append(codes, code)
			if code == http.StatusOK && epoch != before {
				sameTerm = false
			}
			time.Sleep(5 * time.Millisecond)
		}
		now := waitOneActive(t, c, 20*time.Second)
		if _, after := health(); now != active || after != before || !sameTerm {
			t.Logf("trial %d: leadership lapsed (now %s, epoch %s -> %s); not counted", trial, now.ID, before, after)
			active = now
			continue
		}
		trials++
		for _, code := range codes {
			polls++
			if code != http.StatusOK {
				bad++
			}
		}
	}
	t.Logf("%d trials in the same term, %d polls of /health/active after the resume, %d not 200", trials, polls, bad)
	if trials == 0 {
		t.Skip("leadership lapsed in every trial (a loaded machine): nothing to count")
	}
	if bad > 0 {
		t.Errorf("%d of %d polls of the Active's /health/active answered other than 200 after a short freeze it led through in the same term", bad, polls)
	}
}
