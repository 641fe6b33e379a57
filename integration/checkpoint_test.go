package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// TestCheckpointFencesADivergedNode: one byte of a buffered message's
// payload in a stopped node's fsm.db changes (a bit flip the disk did not
// report: bbolt reads the file whole, its check and the scrub find
// nothing). The node starts and proposes a checkpoint; every node digests
// its state at that index and reports; the majority's digest names the
// changed node as diverged, and it fences itself and is rebuilt from the
// leader's snapshot. The Active keeps its role, the change never reaches
// another node, and the next checkpoint finds all three alike. The
// stopped Active's case: the Standby takes over at the stop and keeps the
// role.
func TestCheckpointFencesADivergedNode(t *testing.T) {
	for _, victim := range []string{"standby", "witness", "active"} {
		t.Run(victim, func(t *testing.T) { testCheckpointFencesADivergedNode(t, victim, false) })
	}
}

// TestCheckpointFindsARunningNodeDiverged: the same byte changes in the
// live fsm.db of a running node (written under bbolt, which reads it
// through its memory map). The next periodic checkpoint (the interval is
// short here) finds it; a diverged Active fences itself, so the Standby
// takes over; the node is rebuilt and nothing acknowledged is lost.
func TestCheckpointFindsARunningNodeDiverged(t *testing.T) {
	for _, victim := range []string{"active", "standby", "witness"} {
		t.Run(victim, func(t *testing.T) { testCheckpointFencesADivergedNode(t, victim, true) })
	}
}

func testCheckpointFencesADivergedNode(t *testing.T, victim string, running bool) {
	interval := "1h"
	if running {
		interval = "3s"
	}
	c := newCluster(t, testcluster.Options{Mode: "witness", Voters: 2, Witness: true, LogLevel: "info",
		Extra: "state:\n  checkpoint_interval: " + interval + "\n"})
	start(t, c)
	active := waitOneActive(t, c, 20*time.Second)
	sink := startSink(t)
	deploySite(t, c, testcluster.SiteConfig("checkpoint", map[string]string{"sink": sink.URL}, 1000))
	if err := sink.SetFailing(true); err != nil {
		t.Fatal(err)
	}
	ids := seqIDs("cp", 50)
	enqueueAll(t, active, ids, []byte(checkpointPayload))
	acked := map[string]bool{}
	for _, id := range ids {
		acked[id] = true
	}
	damaged := otherVoter(t, c, active)
	switch victim {
	case "witness":
		damaged = c.Node("witness")
	case "active":
		damaged = active
	}
	// Every node's own start checkpoint agreed before the change.
	testwait.For(t, 30*time.Second, "a checkpoint all three agree on", func() bool {
		cp := newestCheckpoint(t, c, active)
		return cp != nil && cp.Verdict == "agree"
	})
	path := filepath.Join(damaged.Dir, "data", "fsm.db")
	var changedAt time.Time
	if running {
		flipLivePayloadByte(t, path)
		changedAt = time.Now()
	} else {
		c.Stop(damaged)
		testwait.For(t, 20*time.Second, damaged.ID+" to stop", func() bool { return !damaged.Running() })
		flipPayloadByte(t, path)
		changedAt = time.Now()
		if damaged == active {
			active = waitOneActive(t, c, 20*time.Second)
		}
		start(t, c, damaged)
	}

	lookedAt := changedAt
	testwait.For(t, 60*time.Second, damaged.ID+" to find its state diverged", func() bool {
		if strings.Contains(damaged.LogTail(600), "STATE DIVERGED") {
			return true
		}
		// A leaf that the node's open write transaction had read into
		// memory before the change is written back from that copy by its
		// next commit, and the change is gone from the file (as a stray
		// write's would be). Every 3 s: make it again if the committed
		// record shows its payload whole.
		if running && time.Since(lookedAt) > 3*time.Second {
			lookedAt = time.Now()
			if bytes.Contains(liveFirstPending(t, path), []byte(checkpointPayload)) {
				t.Logf("a commit wrote the record over from memory; changing it again")
				flipLivePayloadByte(t, path)
			}
		}
		return false
	})
	t.Logf("%s found diverged %s after the byte changed", damaged.ID, time.Since(changedAt).Round(100*time.Millisecond))
	if damaged == active {
		// It fenced itself: the Standby takes over.
		active = otherVoter(t, c, damaged)
		testwait.For(t, 30*time.Second, active.ID+" to take over from the diverged Active", func() bool {
			a := c.Actives()
			return len(a) == 1 && a[0] == active
		})
	}
	var found *controlpb.Checkpoint
	testwait.For(t, 10*time.Second, "scadactl check to name "+damaged.ID, func() bool {
		var cps []*controlpb.Checkpoint
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.CtlJSON(ctx, []*testcluster.Node{active}, &cps, "check", "--all"); err != nil {
			return false
		}
		for _, cp := range cps {
			if slices.Contains(cp.Diverged, damaged.ID) {
				found = cp
				return true
			}
		}
		return false
	})
	t.Logf("checkpoint %d: %s", found.Index, found.Verdict)
	testwait.For(t, 60*time.Second, damaged.ID+" to rebuild its state", func() bool {
		return strings.Contains(damaged.LogTail(600), "damaged state discarded; this node rejoined")
	})
	testwait.For(t, 60*time.Second, "a newer checkpoint with all three alike", func() bool {
		cp := newestCheckpoint(t, c, active)
		return cp != nil && cp.Index > found.Index && cp.Verdict == "agree"
	})
	for _, n := range c.Nodes {
		if n != damaged && strings.Contains(n.LogTail(4000), "STATE DIVERGED") {
			t.Errorf("%s reports its own state diverged too", n.ID)
		}
	}
	if now := waitOneActive(t, c, 20*time.Second); now != active {
		t.Errorf("the Active moved from %s to %s", active.ID, now.ID)
	}
	if err := sink.SetFailing(false); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, sink, acked, 60*time.Second)
}

func newestCheckpoint(t *testing.T, c *testcluster.Cluster, n *testcluster.Node) *controlpb.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var cps []*controlpb.Checkpoint
	if err := c.CtlJSON(ctx, []*testcluster.Node{n}, &cps, "check"); err != nil || len(cps) == 0 {
		return nil
	}
	return cps[0]
}

// checkpointPayload is every buffered message's payload in the checkpoint
// tests.
const checkpointPayload = "payload that must not change"

// payloadEnd is where the last byte of the payload sits in a buffered
// message's stored record. The payload, not a later field: each failed
// delivery rewrites the record's attempt count and stamp on every node,
// which would write a change there over (the test then waited for a
// divergence that was gone whenever an attempt came first).
func payloadEnd(t *testing.T, record []byte) int {
	t.Helper()
	i := bytes.Index(record, []byte(checkpointPayload))
	if i < 0 {
		t.Fatalf("the buffered message's record does not hold its payload %q", checkpointPayload)
	}
	return i + len(checkpointPayload) - 1
}

// flipPayloadByte changes the last byte of the first buffered message's
// payload in its stored record, through bbolt: the file stays consistent,
// only the content differs from the peers'.
func flipPayloadByte(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, k, v, err := firstPending(tx)
		if err != nil {
			return err
		}
		nv := slices.Clone(v)
		nv[payloadEnd(t, nv)] ^= 0x01
		return b.Put(slices.Clone(k), nv)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// firstPending is the first buffered message in tx: the bucket holding it
// (the sf/pending bucket nests one per target), its key and its record.
func firstPending(tx *bolt.Tx) (*bolt.Bucket, []byte, []byte, error) {
	sf := tx.Bucket([]byte("sf"))
	if sf == nil {
		return nil, nil, nil, fmt.Errorf("no sf bucket")
	}
	pending := sf.Bucket([]byte("pending"))
	if pending == nil {
		return nil, nil, nil, fmt.Errorf("no sf/pending bucket")
	}
	var first func(b *bolt.Bucket) (*bolt.Bucket, []byte, []byte)
	first = func(b *bolt.Bucket) (*bolt.Bucket, []byte, []byte) {
		cur := b.Cursor()
		for k, v := cur.First(); k != nil; k, v = cur.Next() {
			if v == nil {
				if in, k, v := first(b.Bucket(k)); in != nil {
					return in, k, v
				}
				continue
			}
			return b, k, v
		}
		return nil, nil, nil
	}
	b, k, v := first(pending)
	if b == nil {
		return nil, nil, nil, fmt.Errorf("no buffered message")
	}
	return b, k, v, nil
}

// flipLivePayloadByte changes the same byte as flipPayloadByte in the
// state file of a running node, which holds bbolt's lock: it finds the
// first buffered message's stored record in a copy of the file, then
// changes that byte of the record wherever the record occurs in the live
// file (a freed page holding an older copy of the leaf changes too,
// harmlessly).
func flipLivePayloadByte(t *testing.T, path string) {
	t.Helper()
	live, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	record, err := firstPendingIn(t, live)
	if err != nil {
		t.Fatal(err)
	}
	if len(record) < 16 {
		t.Fatalf("no buffered message record long enough to find in %s (%d bytes)", path, len(record))
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	end := payloadEnd(t, record)
	changed := 0
	for off := 0; ; {
		i := bytes.Index(live[off:], record)
		if i < 0 {
			break
		}
		at := int64(off + i + end)
		if _, err := f.WriteAt([]byte{record[end] ^ 0x01}, at); err != nil {
			t.Fatal(err)
		}
		changed++
		off += i + len(record)
	}
	if changed == 0 {
		t.Fatalf("the first buffered message's record is not in the live %s", path)
	}
	t.Logf("changed the last byte of a buffered message's payload at %d place(s) in the live %s", changed, path)
}

// liveFirstPending is the first buffered message's record in the
// committed state of the live file at path (nil when unreadable).
func liveFirstPending(t *testing.T, path string) []byte {
	t.Helper()
	live, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	record, _ := firstPendingIn(t, live)
	return record
}

// firstPendingIn is the first buffered message's record in a copy of a
// state file's bytes.
func firstPendingIn(t *testing.T, file []byte) ([]byte, error) {
	t.Helper()
	db, err := openCopy(t, file)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var record []byte
	err = db.View(func(tx *bolt.Tx) error {
		_, _, v, err := firstPending(tx)
		record = slices.Clone(v)
		return err
	})
	return record, err
}

// openCopy opens a copy of a state file's bytes read-only (the live file
// is locked by the node that runs on it), freelist loaded so pages can be
// told apart.
func openCopy(t *testing.T, file []byte) (*bolt.DB, error) {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "fsm-copy.db")
	if err := os.WriteFile(cp, file, 0o600); err != nil {
		return nil, err
	}
	return bolt.Open(cp, 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true, PreLoadFreelist: true})
}
