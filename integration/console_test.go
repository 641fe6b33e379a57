package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// chromium is Debian's headless browser (.ci/run installs it).
const chromium = "/usr/bin/chromium"

// browser starts a headless Chromium for t (no network but loopback, a
// fresh profile) and returns a context to open tabs from.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	if _, err := exec.LookPath(chromium); err != nil {
		t.Fatalf("the status page tests need Chromium at %s (apt-get install chromium; .ci/run does): %v", chromium, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1500),
	}
	opts = append(opts, extra...)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// tab opens url in a new tab of the browser.
func tab(t *testing.T, b context.Context, url string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return ctx
}

// certPolicy is the Chromium policy .ci/run installs so that a headless
// browser answers a TLS listener's certificate request on 127.0.0.1 with
// the one certificate from a scadad site CA in its profile (headless
// Chromium asks no one and sends none without it).
const certPolicy = "/etc/chromium/policies/managed/scadad-tests.json"

// certBrowser is a browser whose certificate store (an NSS database in
// its own HOME) trusts c's site CA and holds the client certificate name
// (issued with scadactl certs issue), and nothing else.
func certBrowser(t *testing.T, c *testcluster.Cluster, name string) context.Context {
	t.Helper()
	if _, err := os.Stat(certPolicy); err != nil {
		t.Fatalf("the browser test with client certificates needs the Chromium policy %s (.ci/run installs it): %v", certPolicy, err)
	}
	for _, tool := range []string{"certutil", "pk12util", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the browser test with client certificates needs %s (apt-get install libnss3-tools openssl; .ci/run does): %v", tool, err)
		}
	}
	home := t.TempDir()
	db := filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(db, 0o700); err != nil {
		t.Fatal(err)
	}
	p12 := filepath.Join(home, name+".p12")
	for _, cmd := range [][]string{
		{"certutil", "-N", "-d", "sql:" + db, "--empty-password"},
		{"certutil", "-A", "-d", "sql:" + db, "-n", "site CA", "-t", "C,,", "-i", filepath.Join(c.Certs, "ca.crt")},
		{"openssl", "pkcs12", "-export", "-in", filepath.Join(c.Certs, name+".crt"), "-inkey", filepath.Join(c.Certs, name+".key"), "-out", p12, "-passout", "pass:"},
		{"pk12util", "-d", "sql:" + db, "-i", p12, "-W", ""},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd, " "), err, out)
		}
	}
	return browser(t, chromedp.Env("HOME="+home))
}

// pageNode is one row of the page's node table.
type pageNode struct {
	ID, Role, SL, Reach string
	Down                bool
}

// pageState is what a tab shows: its address, the node rows, the pending
// count per target, the timeline's event kinds with their actors, and
// whether any retry or discard button is on the page.
type pageState struct {
	URL     string
	Nodes   map[string]pageNode
	Pending map[string]string
	Events  []string
	Buttons int
	// Roles are the timeline's role lanes ("node role"), Enqueue the
	// series names on the enqueue-rate chart.
	Roles   []string
	Enqueue []string
}

const readPage = `(() => {
  const nodes = {};
  for (const tr of document.querySelectorAll("#nodes tbody tr")) {
    nodes[tr.dataset.node] = {ID: tr.dataset.node, Role: tr.querySelector("td.role").innerText.trim(),
      SL: tr.querySelector("td.sl").innerText.trim(), Reach: tr.querySelector("td.reach").innerText.trim(), Down: tr.classList.contains("down")};
  }
  const pending = {};
  for (const tr of document.querySelectorAll("#targets tbody tr")) pending[tr.dataset.target] = tr.querySelector("td.pending").innerText.trim();
  const events = [...document.querySelectorAll("#timeline g.event")].map(g => g.dataset.kind + " " + g.dataset.actor);
  const roles = [...document.querySelectorAll("#timeline rect.role")].map(r => r.dataset.node + " " + r.dataset.role);
  const enqueue = [...document.querySelectorAll("#chart-enqueue polyline title")].map(t => t.textContent);
  return {URL: location.href, Nodes: nodes, Pending: pending, Events: events,
    Buttons: document.querySelectorAll("button.retry, button.discard, button.retry-all").length, Roles: roles, Enqueue: enqueue};
})()`

func readTab(ctx context.Context) (pageState, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(cctx, chromedp.Evaluate[pageState](readPage))
}

// click clicks the first element sel matches, waiting up to 15 s for one
// that is shown.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	untilShown(t, ctx, sel, "e.click(); ")
}

// shown waits up to 15 s for an element sel matches to be shown.
func shown(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	untilShown(t, ctx, sel, "")
}

// untilShown runs then (JavaScript, with the element as e) on the first
// element sel matches once it is shown, waiting up to 15 s.
func untilShown(t *testing.T, ctx context.Context, sel, then string) {
	t.Helper()
	js := `(() => { const e = document.querySelector(` + strconv.Quote(sel) + `); if (!e || e.offsetParent === null) return false; ` + then + `return true; })()`
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := chromedp.Run(cctx, chromedp.Evaluate[bool](js))
		cancel()
		if err == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no %s shown on the page within 15 s", sel)
}

// waitTab polls the tab until cond holds, and fails t after timeout with
// the last state seen.
func waitTab(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func(pageState) bool) pageState {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last pageState
	var err error
	for time.Now().Before(deadline) {
		if last, err = readTab(ctx); err == nil && cond(last) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for the page to show %s; last %+v (err %v)", timeout, what, last, err)
	return last
}

// screenshot saves the tab's page as name.png under the test's artifact
// folder: $SCADAD_TEST_ARTIFACTS/<test>/ when set (CI keeps it), else the
// test's temporary folder.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SCADAD_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	buf, err := chromedp.Run(cctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// parkOne enqueues id for target while its sink refuses, and waits until
// the message is parked.
func parkOne(t *testing.T, c *testcluster.Cluster, n *testcluster.Node, target, id string) {
	t.Helper()
	if !enqueue(n, target, id, []byte(`{"v":1}`)) {
		t.Fatalf("enqueue %s was not acknowledged", id)
	}
	testwait.For(t, 20*time.Second, id+" parked", func() bool {
		var list struct {
			Messages []struct {
				ID string `json:"id"`
			} `json:"messages"`
		}
		resp, err := http.Get("http://" + n.HTTPAddr + "/ui/api/sf/parked?target=" + target)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&list) != nil {
			return false
		}
		for _, m := range list.Messages {
			if m.ID == id {
				return true
			}
		}
		return false
	})
}

// The status page on the Active and on the Standby shows the same site;
// after a SIGKILL of the Active the survivor's page shows the new Active,
// the dead node unreachable and the leader.elected entry on the timeline
// within 3 s, and the page that was open on the dead node moves to a
// peer; an operator's retry of a parked message from the page reaches the
// sink.
func TestStatusPageInABrowser(t *testing.T) {
	sink := startSink(t)
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, OPCUA: true, LogLevel: "info"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	standby := otherVoter(t, c, active)
	deploySite(t, c, testcluster.SiteConfig("console", map[string]string{"hist": sink.URL}, 2))
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	parkOne(t, c, active, "hist", "parked-1")
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}

	b := browser(t)
	onActive := tab(t, b, "http://"+active.HTTPAddr+"/")
	onStandby := tab(t, b, "http://"+standby.HTTPAddr+"/")
	same := func(s pageState) bool {
		a, ok1 := s.Nodes[active.ID]
		sb, ok2 := s.Nodes[standby.ID]
		w, ok3 := s.Nodes["witness"]
		return ok1 && ok2 && ok3 && a.Role == "active" && sb.Role == "standby" && w.Role == "witness" && a.SL == "250" && sb.SL != "" && sb.SL != "250" &&
			s.Pending["hist"] != "" && len(s.Events) > 0
	}
	// Both pages show the same roles, ServiceLevels and pending counts
	// (each refreshes every second: wait until they agree, at most 10 s).
	var sa, ss pageState
	agree := func() string {
		for id, n := range sa.Nodes {
			if o := ss.Nodes[id]; o.Role != n.Role || o.SL != n.SL {
				return fmt.Sprintf("node %s: the Active's page shows %+v, the Standby's %+v", id, n, o)
			}
		}
		if sa.Pending["hist"] != ss.Pending["hist"] {
			return fmt.Sprintf("pending for hist: %q on the Active's page, %q on the Standby's", sa.Pending["hist"], ss.Pending["hist"])
		}
		return ""
	}
	testwait.ForDetail(t, 10*time.Second, "the Active's and the Standby's page agree", func() (bool, string) {
		sa = waitTab(t, onActive, 15*time.Second, "the site on the Active", same)
		ss = waitTab(t, onStandby, 15*time.Second, "the site on the Standby", same)
		why := agree()
		return why == "", why
	})
	screenshot(t, onActive, "1-site-on-active")
	screenshot(t, onStandby, "2-site-on-standby")

	// Retry the parked message from the page, as an operator (loopback).
	click(t, onActive, `#targets tr[data-target="hist"] button.show-parked`)
	shown(t, onActive, `#parked button.retry[data-id="parked-1"]`)
	screenshot(t, onActive, "3-parked-message")
	click(t, onActive, `#parked button.retry[data-id="parked-1"]`)
	shown(t, onActive, `#confirm-yes`)
	screenshot(t, onActive, "4-retry-confirmation")
	if ds, _ := sink.Deliveries(); delivered(ds, "parked-1") {
		t.Fatal("parked-1 reached the sink before the retry was confirmed")
	}
	click(t, onActive, `#confirm-yes`)
	testwait.For(t, 20*time.Second, "the retried message at the sink", func() bool {
		ds, err := sink.Deliveries()
		return err == nil && delivered(ds, "parked-1")
	})

	// The audit trail names the page as who retried it (the entry commits
	// after the retry, which the delivery may overtake).
	testwait.For(t, 10*time.Second, "an sf-retry audit entry by the status page", func() bool {
		var audit []*controlpb.AuditEntry
		ctlJSON(t, c, []*testcluster.Node{active}, &audit, "audit", "--limit", "1000")
		for _, e := range audit {
			if e.Kind == "sf-retry" && strings.HasPrefix(e.Actor, "status page of "+active.ID+" from 127.0.0.1:") {
				return true
			}
		}
		return false
	})

	// The enqueue-rate chart has the target's series.
	waitTab(t, onActive, 15*time.Second, "the enqueue-rate chart for hist", func(s pageState) bool { return slices.Contains(s.Enqueue, "hist") })

	// A second revision: its diff against the first, from the page.
	deploySite(t, c, testcluster.SiteConfig("console", map[string]string{"hist": sink.URL}, 3))
	click(t, onActive, `button.diff-btn[data-rev="2"]`)
	shown(t, onActive, `#diff span.add`)
	type diffShown struct{ Head, Added, Removed, All string }
	diff, err := chromedp.Run(onActive, chromedp.Evaluate[diffShown](`({Head: document.querySelector("#diff b").innerText,
	  Added: [...document.querySelectorAll("#diff span.add")].map(e => e.innerText).join("\n"),
	  Removed: [...document.querySelectorAll("#diff span.del")].map(e => e.innerText).join("\n"),
	  All: document.querySelector("#diff").innerText})`))
	if err != nil {
		t.Fatalf("read the diff: %v", err)
	}
	if diff.Head != "revision 1 → 2" || !strings.Contains(diff.Added, "max_attempts: 3") || !strings.Contains(diff.Removed, "max_attempts: 2") ||
		strings.Contains(diff.Added, "Pump1") || strings.Index(diff.All, diff.Removed) > strings.Index(diff.All, diff.Added) {
		t.Errorf("diff of revision 2 shows %+v, want max_attempts 2 removed, then 3 added, nothing else", diff)
	}
	screenshot(t, onActive, "5-deploy-diff")

	// SIGKILL of the Active.
	killed := time.Now()
	c.Kill(active)
	survivorShows := func(s pageState) bool {
		d, n := s.Nodes[active.ID], s.Nodes[standby.ID]
		return d.Down && d.Role == "unreachable" && strings.HasPrefix(d.Reach, "NO") && n.Role == "active"
	}
	waitTab(t, onStandby, 3*time.Second-time.Since(killed), "the new Active and the dead node unreachable", survivorShows)
	t.Logf("the survivor's page showed the failover %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	elected := "leader.elected " + standby.ID
	waitTab(t, onStandby, 3*time.Second-time.Since(killed), "a leader.elected entry on the timeline", func(s pageState) bool {
		for _, e := range s.Events {
			if e == elected {
				return true
			}
		}
		return false
	})
	t.Logf("the survivor's timeline showed %s %s after the SIGKILL", elected, time.Since(killed).Round(time.Millisecond))
	// The survivor's role lanes: the dead node went from active to
	// unreachable, the survivor from standby to active.
	lanes := waitTab(t, onStandby, 10*time.Second, "role lanes of the failover on the timeline", func(s pageState) bool {
		return slices.Contains(s.Roles, active.ID+" active") && slices.Contains(s.Roles, active.ID+" unreachable") &&
			slices.Contains(s.Roles, standby.ID+" standby") && slices.Contains(s.Roles, standby.ID+" active")
	})
	t.Logf("the survivor's role lanes: %v", lanes.Roles)
	screenshot(t, onStandby, "6-after-sigkill-of-the-active")

	// The tab that was open on the dead node moves to a peer.
	moved := waitTab(t, onActive, 15*time.Second, "the page moved to a live peer", func(s pageState) bool {
		return !strings.Contains(s.URL, active.HTTPAddr) && s.Nodes[standby.ID].Role == "active"
	})
	t.Logf("the page that was open on %s moved to %s", active.ID, moved.URL)
	screenshot(t, onActive, "7-moved-to-a-peer")
}

func delivered(ds []testcluster.Delivery, id string) bool {
	for _, d := range ds {
		if d.ID == id && d.Status == http.StatusOK {
			return true
		}
	}
	return false
}

// A viewer (here: a node whose page is read-only) sees parked messages
// but no button to act on them, and the API refuses the action.
func TestStatusPageViewerCannotAct(t *testing.T) {
	sink := startSink(t)
	c := newCluster(t, testcluster.Options{Mode: "strict", Voters: 1, LogLevel: "info", Extra: "http:\n  console_read_only: true\n"})
	start(t, c)
	n := waitOneActive(t, c, 20*time.Second)
	deploySite(t, c, testcluster.SiteConfig("viewer", map[string]string{"hist": sink.URL}, 2))
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	parkOne(t, c, n, "hist", "parked-v")

	b := browser(t)
	page := tab(t, b, "http://"+n.HTTPAddr+"/")
	waitTab(t, page, 15*time.Second, "the site", func(s pageState) bool { return s.Nodes[n.ID].Role == "active" })
	click(t, page, `#targets tr[data-target="hist"] button.show-parked`)
	shown(t, page, `#parked tr[data-id="parked-v"]`)
	wctx, wcancel := context.WithTimeout(page, 5*time.Second)
	who, err := chromedp.Run(wctx, chromedp.Evaluate[string](`document.querySelector("#whoami").innerText`))
	wcancel()
	if err != nil {
		t.Fatal(err)
	}
	s, err := readTab(page)
	if err != nil {
		t.Fatal(err)
	}
	if s.Buttons != 0 || !strings.Contains(who, "viewer") {
		t.Fatalf("a viewer's page shows %d retry/discard buttons and says %q", s.Buttons, who)
	}
	screenshot(t, page, "viewer-parked-message")

	// The API refuses the action, from the page's own origin too.
	type answer struct {
		Status int
		Body   string
	}
	actx, acancel := context.WithTimeout(page, 20*time.Second)
	got, err := chromedp.Run(actx, chromedp.Evaluate[answer](`fetch("/ui/api/sf/retry", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({ids: ["parked-v"]})})
	  .then(async r => ({Status: r.status, Body: await r.text()}))`, chromedp.EvalAwaitPromise))
	acancel()
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != http.StatusForbidden || !strings.Contains(got.Body, "operators only") {
		t.Fatalf("a viewer's retry answered %d %s, want 403 operators only", got.Status, got.Body)
	}
	resp, err := http.Post("http://"+n.HTTPAddr+"/ui/api/sf/discard", "application/json", bytes.NewReader([]byte(`{"ids":["parked-v"]}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a viewer's discard answered %d, want 403", resp.StatusCode)
	}
	var parked struct {
		Messages []struct{ ID string } `json:"messages"`
	}
	r2, err := http.Get("http://" + n.HTTPAddr + "/ui/api/sf/parked?target=hist")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	if err := json.NewDecoder(r2.Body).Decode(&parked); err != nil || len(parked.Messages) != 1 {
		t.Fatalf("after the refused actions the parked list is %+v (%v), want parked-v still there", parked, err)
	}
}

// On a TLS listener the status page goes by the client certificate's
// role, as the control API does: no certificate or a producer's reads
// nothing (401), a viewer reads and may not act (403), and in a real
// browser holding each certificate the viewer's page has no buttons while
// the operator's retry from the page reaches the sink, the audit trail
// naming the operator.
func TestStatusPageRolesOnATLSListener(t *testing.T) {
	sink := startSink(t)
	c := newCluster(t, testcluster.Options{Mode: "strict", Voters: 1, LogLevel: "info", HTTPTLS: true})
	start(t, c)
	n := waitOneActive(t, c, 20*time.Second)
	deploySite(t, c, testcluster.SiteConfig("tls", map[string]string{"hist": sink.URL}, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	issueClient(ctx, t, c, "watcher", "viewer")
	issueClient(ctx, t, c, "shiftlead", "operator")
	if out, errs, code, err := c.Ctl(ctx, nil, "certs", "issue", "--dir", c.Certs, "--name", "feed", "--client", "--role", "producer", "--targets", "hist"); err != nil || code != 0 {
		t.Fatalf("certs issue feed: exit %d, %q %q, %v", code, out, errs, err)
	}
	client := func(name string) *http.Client {
		cl, err := c.HTTPClient(name)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	do := func(cl *http.Client, method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, n.URL(path), strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if method == http.MethodPost && strings.HasPrefix(path, "/v1/sf/") {
			req.Header.Set("Idempotency-Key", body)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	if code, body := do(client("feed"), http.MethodPost, "/v1/sf/hist", "parked-tls"); code >= 300 {
		t.Fatalf("enqueue as the producer: %d %s", code, body)
	}
	testwait.For(t, 20*time.Second, "parked-tls parked", func() bool {
		_, body := do(client("watcher"), http.MethodGet, "/ui/api/sf/parked?target=hist", "")
		return strings.Contains(body, `"parked-tls"`)
	})
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}

	for name, want := range map[string]int{"": http.StatusUnauthorized, "feed": http.StatusUnauthorized, "watcher": http.StatusOK, "shiftlead": http.StatusOK} {
		for _, path := range []string{"/", "/ui/api/site"} {
			if code, body := do(client(name), http.MethodGet, path, ""); code != want {
				t.Errorf("GET %s as %q: %d %.200s, want %d", path, name, code, body, want)
			}
		}
	}
	for name, want := range map[string]string{"watcher": `"role":"viewer"`, "shiftlead": `"role":"operator"`} {
		if _, body := do(client(name), http.MethodGet, "/ui/api/site", ""); !strings.Contains(body, want) {
			t.Errorf("site view for %s says no %s: %.300s", name, want, body)
		}
	}
	if code, body := do(client("watcher"), http.MethodPost, "/ui/api/sf/retry", `{"ids":["parked-tls"]}`); code != http.StatusForbidden {
		t.Fatalf("retry as a viewer: %d %s, want 403", code, body)
	}
	if ds, _ := sink.Deliveries(); delivered(ds, "parked-tls") {
		t.Fatal("parked-tls delivered after a viewer's refused retry")
	}

	// In a browser holding each certificate: the viewer reads the page
	// and sees no buttons; the operator retries from it.
	page := "https://" + n.HTTPAddr + "/"
	asViewer := tab(t, certBrowser(t, c, "watcher"), page)
	asOperator := tab(t, certBrowser(t, c, "shiftlead"), page)
	for _, who := range []struct {
		tab  context.Context
		want string
	}{{asViewer, "you: viewer (read only)"}, {asOperator, "you: operator"}} {
		testwait.ForDetail(t, 15*time.Second, "the page says "+who.want, func() (bool, string) {
			cctx, cancel := context.WithTimeout(who.tab, 5*time.Second)
			defer cancel()
			got, err := chromedp.Run(cctx, chromedp.Evaluate[string](`(document.querySelector("#whoami") || {}).textContent || ""`))
			return err == nil && got == who.want, fmt.Sprintf("%q (%v)", got, err)
		})
	}
	for _, tb := range []context.Context{asViewer, asOperator} {
		click(t, tb, `#targets tr[data-target="hist"] button.show-parked`)
		shown(t, tb, `#parked tr[data-id="parked-tls"]`)
	}
	if s, err := readTab(asViewer); err != nil || s.Buttons != 0 {
		t.Errorf("the viewer's page shows %d retry/discard buttons (%v), want none", s.Buttons, err)
	}
	screenshot(t, asViewer, "1-viewer-with-a-client-certificate")
	click(t, asOperator, `#parked button.retry[data-id="parked-tls"]`)
	click(t, asOperator, `#confirm-yes`)
	testwait.For(t, 20*time.Second, "the operator's retried message at the sink", func() bool {
		ds, err := sink.Deliveries()
		return err == nil && delivered(ds, "parked-tls")
	})
	testwait.For(t, 10*time.Second, "an sf-retry audit entry naming shiftlead via the status page", func() bool {
		var audit []*controlpb.AuditEntry
		ctlJSON(t, c, nil, &audit, "audit", "--limit", "1000")
		for _, e := range audit {
			if e.Kind == "sf-retry" && e.Actor == "shiftlead via status page of "+n.ID {
				return true
			}
		}
		return false
	})
}
