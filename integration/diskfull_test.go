package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
)

// TestDiskFullOnANode fills the disk under one voter's data dir (a small
// tmpfs) while messages are enqueued: that node stops with a clear error,
// the others carry on, nothing acknowledged is lost, and the node catches
// up once the disk has room again.
func TestDiskFullOnANode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	c, sink, active := sfSetupPending(t)
	var victim *testcluster.Node
	for _, n := range c.Nodes {
		if n != active && !n.Witness {
			victim = n
		}
	}
	// Move the victim's data onto a 256 MiB tmpfs.
	c.Stop(victim)
	data := filepath.Join(victim.Dir, "data")
	saved := filepath.Join(t.TempDir(), "saved")
	if out, err := exec.Command("cp", "-a", data, saved).CombinedOutput(); err != nil {
		t.Fatalf("copy data: %v %s", err, out)
	}
	os.RemoveAll(data)
	os.MkdirAll(data, 0o750)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", data).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("sh", "-c", "df -k "+data+"; du -ak "+data+" | sort -n | tail -20").CombinedOutput()
			t.Logf("victim's data dir at the end:\n%s", out)
		}
		c.Kill(victim)
		exec.Command("umount", "-l", data).Run()
	})
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("cp -a %s/. %s/", saved, data)).CombinedOutput(); err != nil {
		t.Fatalf("restore data: %v %s", err, out)
	}
	start(t, c, victim)
	waitFor(t, 20*time.Second, victim.ID+" back as standby", func() bool {
		h, ok := victim.Health()
		return ok && h.Role == "standby"
	})
	// Leave little room: what is free less 8 MiB goes into a filler file.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(data, &fs); err != nil {
		t.Fatal(err)
	}
	freeMiB := int64(fs.Bavail) * int64(fs.Bsize) >> 20
	filler := filepath.Join(data, "filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=1M", fmt.Sprintf("count=%d", freeMiB-8)).Run()

	// The node says why it cannot keep up: its raft log or its state store
	// ran out of space. (A failed state store stops the process so the
	// service manager restarts it; a failed raft log append is refused and
	// retried by the leader.)
	reportsFull := func() bool {
		return bytes.Contains([]byte(victim.LogTail(400)), []byte("no space left on device"))
	}
	// Enqueue until the victim runs out of space, and not much more: the
	// node must later hold everything acknowledged twice (raft log and
	// state) in its 256 MiB once the filler is gone.
	acked := map[string]bool{}
	payload := bytes.Repeat([]byte("x"), 16<<10)
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < 2000 && time.Now().Before(deadline); i++ {
		id := fmt.Sprintf("full-%d", i)
		if enqueue(active, "sink", id, payload) {
			acked[id] = true
		}
		if i >= 50 && i%10 == 0 && (!victim.Running() || reportsFull()) {
			break
		}
	}
	waitFor(t, 30*time.Second, victim.ID+" to report the full disk", reportsFull)
	// The rest of the cluster carries on.
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("after-%d", i)
		if !enqueue(active, "sink", id, []byte("y")) {
			t.Fatalf("enqueue %s failed with one voter's disk full", id)
		}
		acked[id] = true
	}
	// Room again: the node catches up (restarted, as a service manager
	// would, if it stopped).
	os.Remove(filler)
	waitFor(t, 60*time.Second, victim.ID+" caught up", func() bool {
		if victim.Exited() {
			c.Kill(victim)
			start(t, c, victim)
		}
		var a, v controlpb.StatusResponse
		if err := c.CtlJSON(t.Context(), []*testcluster.Node{active}, &a, "status"); err != nil {
			return false
		}
		if err := c.CtlJSON(t.Context(), []*testcluster.Node{victim}, &v, "status"); err != nil {
			return false
		}
		return v.Role == "standby" && v.AppliedIndex >= a.AppliedIndex-2
	})
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, sink, acked, 60*time.Second)
	t.Logf("%d acknowledged with one voter's disk full, all delivered", len(acked))
}
