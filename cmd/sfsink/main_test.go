package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
)

// startSink runs the real entry point with args and returns its base URL
// and a stop function that waits for run to return.
func startSink(t *testing.T, args ...string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := run(ctx, args, pw, io.Discard)
		pw.CloseWithError(fmt.Errorf("run returned: %v", err))
		errc <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("read bound address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Second):
			return fmt.Errorf("run did not return")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return "http://" + strings.TrimSpace(line), stop
}

func post(t *testing.T, url, id, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		req.Header.Set("Idempotency-Key", id)
	}
	req.Header.Set("X-Scadad-Epoch", "1.7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func TestSinkRecordsAndFailsFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	base, stop := startSink(t, "-record", path, "-fail-first", "2", "-status", "500")
	want := []int{500, 500, 200, 200}
	for i, w := range want {
		if got := post(t, base+"/in", fmt.Sprintf("id-%d", i), fmt.Sprintf("body-%d", i)); got != w {
			t.Fatalf("request %d: status %d, want %d", i, got, w)
		}
	}
	// Records are synced before the answer, so they are readable before stop.
	recs := readRecords(t, path)
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		sum := sha256.Sum256([]byte(fmt.Sprintf("body-%d", i)))
		if r.ID != fmt.Sprintf("id-%d", i) || r.Status != want[i] || r.Epoch != "1.7" ||
			r.SHA256 != hex.EncodeToString(sum[:]) || r.Size != len(fmt.Sprintf("body-%d", i)) || r.Seq != uint64(i+1) || r.Path != "/in" {
			t.Errorf("record %d = %+v", i, r)
		}
		if _, err := time.Parse(time.RFC3339Nano, r.Time); err != nil {
			t.Errorf("record %d time %q: %v", i, r.Time, err)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestSinkRecordsBodiesOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"-bodies"}, `{"rule":"r"}`},
	} {
		path := filepath.Join(t.TempDir(), "rec.jsonl")
		base, stop := startSink(t, append([]string{"-record", path}, tc.args...)...)
		if got := post(t, base+"/in", "id-0", `{"rule":"r"}`); got != 200 {
			t.Fatalf("%v: status %d", tc.args, got)
		}
		if err := stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		recs := readRecords(t, path)
		if len(recs) != 1 || string(recs[0].Body) != tc.want {
			t.Fatalf("%v: recorded %+v, want body %q", tc.args, recs, tc.want)
		}
	}
}

func TestSinkControlSwitchesFailing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	base, _ := startSink(t, "-record", path)
	steps := []struct {
		control string // POST /control query, empty for none
		want    int
	}{
		{"", 200},
		{"fail=true", 503},
		{"", 503},
		{"fail=false", 200},
	}
	for i, s := range steps {
		if s.control != "" {
			resp, err := http.Post(base+"/control?"+s.control, "", nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("control %s: %v %v", s.control, resp, err)
			}
			resp.Body.Close()
		}
		if got := post(t, base+"/", fmt.Sprint(i), "x"); got != s.want {
			t.Fatalf("step %d: status %d, want %d", i, got, s.want)
		}
	}
	resp, err := http.Get(base + "/control")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st controlState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Requests != 4 || st.OK != 2 || st.Failed != 2 || st.Fail {
		t.Fatalf("control state %+v", st)
	}
	bad, err := http.Post(base+"/control?fail=maybe", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest {
		t.Fatalf("fail=maybe: status %d", bad.StatusCode)
	}
}

func TestSinkDelayedAnswerAbandonedIsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	base, stop := startSink(t, "-record", path, "-delay", "1h")
	client := &http.Client{Timeout: 100 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodPost, base+"/", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", "slow")
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a 1h delay answered: %d", resp.StatusCode)
	}
	testwait.For(t, 5*time.Second, "the abandoned request recorded", func() bool {
		b, _ := os.ReadFile(path)
		return len(b) > 0
	})
	recs := readRecords(t, path)
	if len(recs) != 1 || recs[0].Status != statusClientGone || recs[0].ID != "slow" {
		t.Fatalf("records %+v", recs)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestParseFlags(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr bool
	}{
		{nil, false},
		{[]string{"-fail-rate", "0.5", "-status", "429"}, false},
		{[]string{"-fail-rate", "1.5"}, true},
		{[]string{"-fail-first", "-1"}, true},
		{[]string{"-status", "200"}, true},
		{[]string{"-delay", "-1s"}, true},
		{[]string{"extra"}, true},
		{[]string{"-nope"}, true},
	}
	for _, c := range cases {
		_, err := parseFlags(c.args, io.Discard)
		if (err != nil) != c.wantErr {
			t.Errorf("parseFlags(%q) error = %v, want error %v", c.args, err, c.wantErr)
		}
	}
}

func TestFailRateIsSeededAndApproximate(t *testing.T) {
	cfg := config{failRate: 0.3, status: 503, seed: 42}
	a, b := newSink(cfg, nil), newSink(cfg, nil)
	fails := 0
	for i := uint64(1); i <= 10000; i++ {
		fa, fb := a.shouldFail(i), b.shouldFail(i)
		if fa != fb {
			t.Fatalf("same seed, different draw at %d", i)
		}
		if fa {
			fails++
		}
	}
	if fails < 2700 || fails > 3300 {
		t.Fatalf("%d of 10000 failed at rate 0.3", fails)
	}
}

func TestSinkConcurrentRequestsAllRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	base, stop := startSink(t, "-record", path)
	const n = 64
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			req, _ := http.NewRequest(http.MethodPost, base+"/", strings.NewReader(fmt.Sprint(i)))
			req.Header.Set("Idempotency-Key", fmt.Sprint("c", i))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			errs <- err
		}(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	recs := readRecords(t, path)
	ids, seqs := map[string]bool{}, map[uint64]bool{}
	for _, r := range recs {
		ids[r.ID], seqs[r.Seq] = true, true
	}
	if len(recs) != n || len(ids) != n || len(seqs) != n {
		t.Fatalf("%d records, %d distinct ids, %d distinct seqs; want %d each", len(recs), len(ids), len(seqs), n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestSinkSendsRetryAfterWithFailures(t *testing.T) {
	base, stop := startSink(t, "-fail-first", "1", "-status", "503", "-retry-after", "2")
	defer stop()
	for i, want := range []string{"2", ""} {
		resp, err := http.Post(base+"/in", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Retry-After"); got != want {
			t.Fatalf("request %d (%d): Retry-After %q, want %q", i, resp.StatusCode, got, want)
		}
	}
}
