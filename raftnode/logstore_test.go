package raftnode

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/scadad/scadad/internal/testwait"
)

// A cluster on raft-boltdb restarted with LogStoreWAL moves each node's
// log (real raft.db files) into raft-wal: the same entries at the same
// indexes, the same term, the state intact, and writes go on.
func TestBoltLogMigratesToWAL(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "b", "w"}
	h := newHarness(t, ModeWitness, ids, "w")
	h.tweak = func(c *Config) { c.LogStore = LogStoreBoltDB }
	for _, id := range ids {
		h.start(id)
	}
	lead := h.waitOneActive(20 * time.Second)
	h.apply(lead, "one")
	h.apply(lead, "two")
	type before struct {
		last uint64
		term uint64
		log  raft.Log
	}
	was := map[string]before{}
	testwait.ForDetail(t, 10*time.Second, "every node stored both entries", func() (bool, string) {
		for _, id := range ids {
			if n, _ := h.node(id).logs.LastIndex(); n != h.node(lead).Raft().LastIndex() {
				return false, id + " behind"
			}
		}
		return true, ""
	})
	for _, id := range ids {
		n := h.node(id)
		last, err := n.logs.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		var l raft.Log
		if err := n.logs.GetLog(last, &l); err != nil {
			t.Fatalf("%s: read entry %d: %v", id, last, err)
		}
		term, err := n.stable.GetUint64([]byte("CurrentTerm"))
		if err != nil {
			t.Fatal(err)
		}
		was[id] = before{last, term, l}
	}
	for _, id := range ids {
		h.kill(id)
	}
	h.tweak = func(c *Config) { c.LogStore = LogStoreWAL }
	for _, id := range ids {
		h.start(id)
	}
	for _, id := range ids {
		n, b := h.node(id), was[id]
		var l raft.Log
		if err := n.logs.GetLog(b.last, &l); err != nil {
			t.Fatalf("%s: entry %d after the migration: %v", id, b.last, err)
		}
		if l.Term != b.log.Term || l.Type != b.log.Type || !bytes.Equal(l.Data, b.log.Data) {
			t.Fatalf("%s: entry %d is %+v after the migration, was %+v", id, b.last, l, b.log)
		}
		if term, err := n.stable.GetUint64([]byte("CurrentTerm")); err != nil || term < b.term {
			t.Fatalf("%s: term %d (%v) after the migration, was %d", id, term, err, b.term)
		}
		dir := h.dirs[id]
		if _, err := os.Stat(filepath.Join(dir, walDir)); err != nil {
			t.Fatalf("%s: no WAL after the migration: %v", id, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "raft.db")); !os.IsNotExist(err) {
			t.Fatalf("%s: raft.db still in place after the migration (%v)", id, err)
		}
		if _, err := os.Stat(filepath.Join(dir, boltAfterMigration)); err != nil {
			t.Fatalf("%s: the old raft.db was not kept aside: %v", id, err)
		}
	}
	lead = h.waitOneActive(20 * time.Second)
	h.apply(lead, "three")
	testwait.ForDetail(t, 10*time.Second, "three applied everywhere", func() (bool, string) {
		for _, id := range ids {
			if !slices.Equal(h.fsms[id].Values(), []string{"one", "two", "three"}) {
				return false, id + ": " + strings.Join(h.fsms[id].Values(), ",")
			}
		}
		return true, ""
	})
	// Going back to raft-boltdb would start from another log: refused.
	h.kill("a")
	cfg := h.config("a")
	cfg.LogStore = LogStoreBoltDB
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "raft.log_store: wal") {
		t.Fatalf("boltdb over a WAL: err %v, want a refusal naming raft.log_store: wal", err)
	}
}

// A migration that stopped after the WAL was complete but before raft.db
// was put aside finishes at the next start without copying again.
func TestWALMigrationInterruptedBeforeTheRenameFinishes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ModeStrict, []string{"a"}, "")
	h.tweak = func(c *Config) { c.LogStore = LogStoreBoltDB }
	h.start("a")
	h.waitOneActive(20 * time.Second)
	h.apply("a", "one")
	h.kill("a")
	dir := h.dirs["a"]
	// Copy raft.db, migrate, then put the copy back as if the rename had
	// not happened.
	data, err := os.ReadFile(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	h.tweak = func(c *Config) { c.LogStore = LogStoreWAL }
	h.start("a")
	h.waitOneActive(20 * time.Second)
	h.apply("a", "two")
	h.kill("a")
	if err := os.WriteFile(filepath.Join(dir, "raft.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	h.start("a")
	h.waitOneActive(20 * time.Second)
	h.apply("a", "three")
	if got := h.fsms["a"].Values(); !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Fatalf("values %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); !os.IsNotExist(err) {
		t.Fatalf("raft.db not put aside (%v)", err)
	}
}

// On Windows raft-wal cannot create its log (it syncs its folder): auto
// gives a new node raft.db there. The Wine test runs it for real.
func TestAutoLogStoreForANewNodeOnWindowsIsBoltDB(t *testing.T) {
	if got := newLogStore("windows"); got != LogStoreBoltDB {
		t.Errorf("windows: %s", got)
	}
	if got := newLogStore("linux"); got != LogStoreWAL {
		t.Errorf("linux: %s", got)
	}
}

// LogStoreAuto gives a new node a WAL and leaves a node whose log is
// already in raft.db on raft.db: an upgraded node changes nothing on disk,
// so a node on raft-boltdb alone (the previous release) still starts on
// its folder with every entry.
func TestAutoLogStoreIsWALForANewNodeAndKeepsAnExistingRaftDB(t *testing.T) {
	t.Parallel()
	fresh := newHarness(t, ModeStrict, []string{"a"}, "")
	fresh.tweak = func(c *Config) { c.LogStore = LogStoreAuto }
	fresh.start("a")
	fresh.waitOneActive(20 * time.Second)
	fresh.apply("a", "one")
	fresh.kill("a")
	dir := fresh.dirs["a"]
	if _, err := os.Stat(filepath.Join(dir, walDir)); err != nil {
		t.Fatalf("a new node on auto has no WAL: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); !os.IsNotExist(err) {
		t.Fatalf("a new node on auto made a raft.db (%v)", err)
	}
	fresh.start("a")
	fresh.waitOneActive(20 * time.Second)
	fresh.apply("a", "two")
	if got := fresh.fsms["a"].Values(); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("values after a restart on the WAL: %v", got)
	}

	old := newHarness(t, ModeStrict, []string{"a"}, "")
	old.tweak = func(c *Config) { c.LogStore = LogStoreBoltDB }
	old.start("a")
	old.waitOneActive(20 * time.Second)
	old.apply("a", "one")
	old.kill("a")
	old.tweak = func(c *Config) { c.LogStore = LogStoreAuto }
	old.start("a")
	old.waitOneActive(20 * time.Second)
	old.apply("a", "two")
	old.kill("a")
	dir = old.dirs["a"]
	if _, err := os.Stat(filepath.Join(dir, walDir)); !os.IsNotExist(err) {
		t.Fatalf("auto moved an existing raft.db into a WAL (%v)", err)
	}
	old.tweak = func(c *Config) { c.LogStore = LogStoreBoltDB }
	old.start("a")
	old.waitOneActive(20 * time.Second)
	if got := old.fsms["a"].Values(); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("values on raft.db after running on auto: %v", got)
	}
}
