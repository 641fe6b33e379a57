package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/scadad/scadad/fsm/fsmpb"
)

func probe() *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_FeatureProbe{FeatureProbe: &fsmpb.FeatureProbe{}}}
}

func recordFeatures(node string, level Level, version string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_RecordFeatures{RecordFeatures: &fsmpb.RecordFeatures{NodeId: node, Level: uint32(level), Version: version}}}
}

// TestEveryCommandHasALevel: a body added to the proto but not to the
// level table would be refused by Encode and unknown to the gate.
func TestEveryCommandHasALevel(t *testing.T) {
	od := (&fsmpb.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("body")
	fields := od.Fields()
	for i := 0; i < fields.Len(); i++ {
		name := fields.Get(i).Name()
		l, ok := commandLevel(name)
		if !ok {
			t.Errorf("command body %s has no level in commandLevel", name)
			continue
		}
		if l < 1 || l > FeatureLevel+1 {
			t.Errorf("command body %s has level %d, want 1..%d", name, l, FeatureLevel+1)
		}
	}
}

func TestEntryLevel(t *testing.T) {
	for _, tc := range []struct {
		cmd  *fsmpb.Command
		want Level
	}{
		{audit("k", "d"), 1},
		{recordFeatures("a", 2, "v"), 1},
		{probe(), FeatureLevel + 1},
	} {
		data, err := Encode(tc.cmd)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EntryLevel(data)
		if err != nil || got != tc.want {
			t.Errorf("EntryLevel(%T) = %d, %v; want %d", tc.cmd.Body, got, err, tc.want)
		}
	}
	// A stamped level above the body's table level counts (a newer build
	// may raise an existing body's level).
	data := futureEntry(t, 7, "v0.7.0", 11)
	if got, err := EntryLevel(data); err != nil || got != 7 {
		t.Errorf("stamped level 7: got %d, %v", got, err)
	}
	if _, err := EntryLevel(futureEntry(t, 3, "v0.3.0", 99)); err == nil || !strings.Contains(err.Error(), "field 99") {
		t.Errorf("unknown body: err = %v, want it to name field 99", err)
	}
	if _, err := EntryLevel([]byte{0xff, 0xff}); err == nil {
		t.Error("malformed bytes: no error")
	}
}

// futureEntry encodes what a newer release would write: envelope version
// 1, a stamped level and release, and a body in field bodyField.
func futureEntry(t *testing.T, level Level, release string, bodyField protowire.Number) []byte {
	t.Helper()
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 1_700_000_000_000_000_000)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, "future")
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(level))
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendString(b, release)
	b = protowire.AppendTag(b, bodyField, protowire.BytesType)
	b = protowire.AppendBytes(b, nil)
	return b
}

// TestApplyStopsAtAnEntryAboveItsLevel is the fail-stop: the entry and
// everything after it wait (never skipped), no snapshot or restore
// happens meanwhile, and a node that applies the level takes them on.
func TestApplyStopsAtAnEntryAboveItsLevel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	f := openTestFSMAt(t, path)
	w := newLogWriter(t)
	mustOK(t, f, w.cmd(audit("before", "applied")))
	src := openTestFSM(t)
	var snap bytes.Buffer
	if _, err := src.Backup(&snap); err != nil {
		t.Fatal(err)
	}

	p := w.cmd(probe())
	after := w.cmd(audit("after", "must wait"))
	res := f.ApplyBatch([]*raft.Log{p, after})
	for i, r := range res {
		var b *BlockedError
		if !errors.As(r.(*Result).Err, &b) {
			t.Fatalf("entry %d: err = %v, want a BlockedError", i, r.(*Result).Err)
		}
		if b.Index != p.Index || b.Need != FeatureLevel+1 || b.Have != FeatureLevel {
			t.Errorf("entry %d: blocked = %+v", i, b)
		}
	}
	if got := f.Meta().AppliedIndex; got != p.Index-1 {
		t.Fatalf("applied index %d, want %d (stopped before the probe)", got, p.Index-1)
	}
	if f.ApplyBlocked() == nil || !strings.Contains(f.ApplyBlocked().Error(), fmt.Sprintf("needs FSM feature level %d", FeatureLevel+1)) {
		t.Fatalf("ApplyBlocked = %v", f.ApplyBlocked())
	}
	later := w.cmd(audit("later", "also waits"))
	if r := applyOne(t, f, later); !errors.As(r.Err, new(*BlockedError)) {
		t.Fatalf("later entry: err = %v, want blocked", r.Err)
	}
	if _, err := f.Snapshot(); err == nil {
		t.Fatal("snapshot of a blocked state was taken")
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err == nil {
		t.Fatal("restore into a blocked state was accepted")
	}
	entries, err := f.Audit(0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Kind != "before" {
		t.Fatalf("audit %+v, want only the entry before the probe", entries)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// The upgraded node: the same file, the same log replayed.
	up, err := Open(path, Options{Logger: zerolog.Nop(), NoSync: true, FeatureLevel: FeatureLevel + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	for _, l := range []*raft.Log{p, after, later} {
		mustOK(t, up, l)
	}
	entries, err = up.Audit(0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[1].Kind != "after" || entries[2].Kind != "later" {
		t.Fatalf("after the upgrade the audit is %+v, want before, after, later", entries)
	}
}

// TestUnknownBodyOfANewerLevelBlocks: a body this build has never heard of
// is judged by the level the writer stamped, and the error names the
// release to install; one at a level this build claims is a malformed
// command, refused like any other.
func TestUnknownBodyOfANewerLevelBlocks(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	r := applyOne(t, f, w.raw(futureEntry(t, FeatureLevel+4, "v0.6.0", 99)))
	var b *BlockedError
	if !errors.As(r.Err, &b) || !strings.Contains(b.Error(), "scadad v0.6.0 or newer") {
		t.Fatalf("err = %v, want blocked naming v0.6.0", r.Err)
	}

	g := openTestFSM(t)
	w = newLogWriter(t)
	r = applyOne(t, g, w.raw(futureEntry(t, FeatureLevel, "", 99)))
	if !errors.Is(r.Err, ErrDecode) || g.ApplyBlocked() != nil {
		t.Fatalf("unknown body at our level: err = %v, blocked = %v; want a decode refusal", r.Err, g.ApplyBlocked())
	}
	if g.Meta().AppliedIndex != 1 {
		t.Fatalf("applied index %d, want 1", g.Meta().AppliedIndex)
	}
}

func TestRecordFeatures(t *testing.T) {
	f := openTestFSM(t)
	w := newLogWriter(t)
	mustOK(t, f, w.cmd(recordFeatures("node-b", 2, "v0.2.0")))
	mustOK(t, f, w.cmd(recordFeatures("node-a", 2, "v0.2.0")))
	mustOK(t, f, w.cmd(recordFeatures("node-a", 2, "v0.2.0-5-gabc"))) // same level: not audited
	mustOK(t, f, w.cmd(recordFeatures("node-b", 1, "v0.1.9")))
	for _, bad := range []*fsmpb.Command{recordFeatures("", 2, "v"), recordFeatures("n", 0, "v")} {
		if r := applyOne(t, f, w.cmd(bad)); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("%v: err = %v, want invalid", bad, r.Err)
		}
	}
	got, err := f.NodeLevels()
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeLevel{{"node-a", 2, "v0.2.0-5-gabc"}, {"node-b", 1, "v0.1.9"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("NodeLevels = %+v, want %+v", got, want)
	}
	entries, err := f.Audit(0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[2].Detail != "node node-b FSM feature level 2 (v0.2.0) -> 1 (v0.1.9)" {
		t.Fatalf("audit %+v", entries)
	}
}

func TestClusterLevel(t *testing.T) {
	recs := []NodeLevel{{"a", 3, "v0.3.0"}, {"b", 2, "v0.2.0"}, {"w", 3, "v0.3.0"}}
	if l, low := ClusterLevel(recs, []string{"a", "b", "w"}); l != 2 || low.NodeID != "b" {
		t.Errorf("got %d %+v, want 2 from b", l, low)
	}
	if l, low := ClusterLevel(recs, []string{"a", "w", "old"}); l != 1 || low.NodeID != "old" {
		t.Errorf("member without a record: got %d %+v, want 1 from old", l, low)
	}
	if l, _ := ClusterLevel(recs, []string{"a", "w"}); l != 3 {
		t.Errorf("removed member still counted: got %d", l)
	}
}

// TestOpenRefusesANewerSchema: an older binary on a newer file says what
// it found, what it reads and how to go back.
func TestOpenRefusesANewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	f := openTestFSMAt(t, path)
	_ = f.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchema, u64(SchemaVersion+1)) }); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	_, err = Open(path, Options{Logger: zerolog.Nop(), NoSync: true})
	if err == nil {
		t.Fatal("a newer schema opened")
	}
	for _, want := range []string{"schema version 2", "reads schema 1..1", "restore the snapshot taken before the upgrade"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestOpenMigratesAnEarlierFile: a v0.1.0 file has no features bucket.
func TestOpenMigratesAnEarlierFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	f := openTestFSMAt(t, path)
	w := newLogWriter(t)
	mustOK(t, f, w.cmd(audit("k", "d")))
	_ = f.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketFeatures) }); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	f = openTestFSMAt(t, path)
	defer f.Close()
	mustOK(t, f, w.cmd(recordFeatures("a", 2, "v0.2.0")))
	if got, _ := f.NodeLevels(); len(got) != 1 {
		t.Fatalf("NodeLevels after migration = %+v", got)
	}
}

func TestRestoreRefusesANewerSnapshotFormat(t *testing.T) {
	src := openTestFSM(t)
	var buf bytes.Buffer
	if _, err := src.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	binary.BigEndian.PutUint32(b[8:12], SnapshotFormat+1)
	dst := openTestFSM(t)
	err := dst.Restore(io.NopCloser(bytes.NewReader(b)))
	if !errors.Is(err, ErrSnapshotNewer) || !strings.Contains(err.Error(), "written by a newer scadad") {
		t.Fatalf("err = %v, want ErrSnapshotNewer", err)
	}
}
