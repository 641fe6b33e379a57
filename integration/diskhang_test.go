package integration

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// onFreezableDisk moves victim's data folder onto an ext4 file system of
// its own (a loop-mounted image) and restarts it there. It returns freeze,
// which makes every write to that file system block, as on a disk that
// stops answering, and the function that thaws it. A frozen file system
// thaws by itself after maxFrozen, whatever becomes of the test process,
// so a test killed by its timeout cannot leave it frozen.
func onFreezableDisk(t *testing.T, c *testcluster.Cluster, victim *testcluster.Node, maxFrozen time.Duration) (freeze func() (thaw func())) {
	t.Helper()
	for _, tool := range []string{"fsfreeze", "mkfs.ext4", "setsid"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	dir := onOwnMount(t, c, victim, "data", func(dir string, used int64) error {
		size := fmt.Sprintf("%dM", used+256)
		if out, err := exec.Command("truncate", "-s", size, img).CombinedOutput(); err != nil {
			return fmt.Errorf("truncate: %v %s", err, out)
		}
		if out, err := exec.Command("mkfs.ext4", "-q", img).CombinedOutput(); err != nil {
			return fmt.Errorf("mkfs.ext4: %v %s", err, out)
		}
		if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
			return fmt.Errorf("mount: %v %s", err, out)
		}
		return nil
	})
	return func() func() {
		t.Helper()
		if out, err := exec.Command("fsfreeze", "-f", dir).CombinedOutput(); err != nil {
			t.Fatalf("fsfreeze -f %s: %v %s", dir, err, out)
		}
		// The guard thaws it at maxFrozen even if this process is gone.
		guard := exec.Command("setsid", "sh", "-c", fmt.Sprintf("sleep %d; fsfreeze -u %s", int(maxFrozen.Seconds()), dir))
		if err := guard.Start(); err != nil {
			exec.Command("fsfreeze", "-u", dir).Run()
			t.Fatalf("start the thaw guard: %v", err)
		}
		thawed := false
		thaw := func() {
			if !thawed {
				thawed = true
				exec.Command("fsfreeze", "-u", dir).Run()
				_ = guard.Process.Kill()
				_ = guard.Wait()
			}
		}
		t.Cleanup(thaw) // runs before onOwnMount's kill and unmount
		return thaw
	}
}

// TestAHungDiskUnderTheActiveHandsTheRoleOver freezes the file system
// under the Active's data folder while it is asked to write: its raft log
// and state file stop answering, and its applies with them. Raft alone
// never ends that (the frozen leader keeps heartbeating, so no one else is
// elected, and it can neither confirm its leadership nor commit); the node
// must stop so the other voter takes over, and nothing acknowledged is
// lost.
func TestAHungDiskUnderTheActiveHandsTheRoleOver(t *testing.T) {
	c, sink := sfSetup(t, 1000)
	first := waitOneActive(t, c, 10*time.Second)
	victim := otherVoter(t, c, first)
	freeze := onFreezableDisk(t, c, victim, 150*time.Second)
	var moved controlpb.FailoverResponse
	ctlJSON(t, c, nil, &moved, "failover", "--to", victim.ID)
	if got := waitOneActive(t, c, 20*time.Second); got != victim {
		t.Fatalf("Active after the failover is %s, want %s (on the freezable disk)", got.ID, victim.ID)
	}
	acked := map[string]bool{}
	before := seqIDs("before", 20)
	enqueueAll(t, victim, before, []byte("x"))
	for _, id := range before {
		acked[id] = true
	}

	thaw := freeze()
	frozenAt := time.Now()
	// A write the frozen Active is asked for: committed by the other two
	// (maybe), never applied here; not acknowledged, so nothing promised.
	go func() {
		cl := &http.Client{Timeout: 5 * time.Second}
		enqueueWith(cl, victim, "sink", "during-freeze", []byte("x"))
	}()
	survivor := first
	testwait.ForDetail(t, 90*time.Second, survivor.ID+" Active after the freeze", func() (bool, string) {
		h, ok := survivor.Health()
		return ok && h.Role == "active", fmt.Sprintf("%s: %+v", survivor.ID, h)
	})
	t.Logf("%s Active %s after %s's disk froze", survivor.ID, time.Since(frozenAt).Round(time.Millisecond), victim.ID)
	if !strings.Contains(victim.LogTail(200), "storage stalled") {
		t.Fatalf("%s's log does not say why it stopped:\n%s", victim.ID, victim.LogTail(40))
	}

	after := seqIDs("after", 20)
	enqueueAll(t, survivor, after, []byte("x"))
	for _, id := range after {
		acked[id] = true
	}
	thaw()
	testwait.For(t, 30*time.Second, victim.ID+"'s process ended once its disk answered", victim.Exited)
	if code := victim.ExitCode(); code == 0 {
		t.Fatalf("%s exited with status 0 after a stalled apply; the service manager restarts only on failure", victim.ID)
	}
	if dup := waitDelivered(t, sink, acked, 60*time.Second); len(dup) > 0 {
		t.Logf("delivered more than once (allowed, at least once): %v", dup)
	}
}

// TestAHungDiskUnderTheStandbyLeavesTheActiveServing freezes the file
// system under the Standby's data folder: the Active goes on acknowledging
// with the witness, the Standby stops itself (its raft log write hangs),
// and once the disk answers and the service manager starts it again it
// catches up; nothing acknowledged is lost.
func TestAHungDiskUnderTheStandbyLeavesTheActiveServing(t *testing.T) {
	c, sink := sfSetup(t, 1000)
	active := waitOneActive(t, c, 10*time.Second)
	victim := otherVoter(t, c, active)
	freeze := onFreezableDisk(t, c, victim, 150*time.Second)
	thaw := freeze()
	frozenAt := time.Now()
	acked := map[string]bool{}
	during := seqIDs("during", 40)
	enqueueAll(t, active, during, []byte("x"))
	for _, id := range during {
		acked[id] = true
	}
	t.Logf("%d messages acknowledged by %s in %s with %s's disk frozen", len(during), active.ID, time.Since(frozenAt).Round(time.Millisecond), victim.ID)
	testwait.For(t, 60*time.Second, victim.ID+" stopping on its stalled storage", func() bool {
		return strings.Contains(victim.LogTail(200), "storage stalled")
	})
	if h, ok := active.Health(); !ok || h.Role != "active" {
		t.Fatalf("%s is %+v after the Standby's disk hung, want still active", active.ID, h)
	}
	thaw()
	testwait.For(t, 30*time.Second, victim.ID+"'s process ended once its disk answered", victim.Exited)
	if code := victim.ExitCode(); code == 0 {
		t.Fatalf("%s exited with status 0 after stalled storage", victim.ID)
	}
	testwait.For(t, 60*time.Second, victim.ID+" restarted and caught up", func() bool { return caughtUp(t, c, active, victim) })
	if dup := waitDelivered(t, sink, acked, 60*time.Second); len(dup) > 0 {
		t.Logf("delivered more than once (allowed, at least once): %v", dup)
	}
}
