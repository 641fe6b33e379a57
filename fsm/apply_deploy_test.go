package fsm

import (
	"bytes"
	"errors"
	"testing"
)

func TestArtifactCommitVerifiesChunks(t *testing.T) {
	data := bytes.Repeat([]byte("site config line\n"), 1000)
	sha := shaOf(data)
	parts := chunks(data, 4)
	bad := append([]byte(nil), parts[2]...)
	bad[0] ^= 0xff

	tests := []struct {
		name    string
		puts    map[uint32][]byte // chunk index → data
		size    uint64
		total   uint32
		wantErr error
	}{
		{"all chunks good", map[uint32][]byte{0: parts[0], 1: parts[1], 2: parts[2], 3: parts[3]}, uint64(len(data)), 4, nil},
		{"one chunk corrupted", map[uint32][]byte{0: parts[0], 1: parts[1], 2: bad, 3: parts[3]}, uint64(len(data)), 4, ErrArtifactChecksum},
		{"chunk missing", map[uint32][]byte{0: parts[0], 1: parts[1], 3: parts[3]}, uint64(len(data)), 4, ErrArtifactIncomplete},
		{"wrong size", map[uint32][]byte{0: parts[0], 1: parts[1], 2: parts[2], 3: parts[3]}, uint64(len(data)) + 1, 4, ErrArtifactChecksum},
		{"wrong chunk count", map[uint32][]byte{0: parts[0], 1: parts[1], 2: parts[2], 3: parts[3]}, uint64(len(data)), 5, ErrInvalid},
		{"no chunks at all", nil, uint64(len(data)), 4, ErrArtifactIncomplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, w := openTestFSM(t), newLogWriter(t)
			for i := uint32(0); i < 4; i++ {
				if d, ok := tt.puts[i]; ok {
					mustOK(t, f, w.cmd(putChunk(sha, i, 4, d)))
				}
			}
			r := applyOne(t, f, w.cmd(commitArtifact(sha, tt.size, tt.total)))
			if !errors.Is(r.Err, tt.wantErr) || (tt.wantErr == nil) != (r.Err == nil) {
				t.Fatalf("commit error %v, want %v", r.Err, tt.wantErr)
			}
			got, err := f.Artifact(sha)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("uncommitted artifact readable: %d bytes", len(got))
				}
				if tt.puts != nil && !errors.Is(err, ErrArtifactUnavailable) {
					t.Fatalf("read error %v, want ErrArtifactUnavailable", err)
				}
				// Nothing may deploy it.
				r := applyOne(t, f, w.cmd(deploy("site", 0, sha, "", 0)))
				if !errors.Is(r.Err, ErrArtifactNotCommitted) {
					t.Fatalf("deploy of uncommitted artifact: %v", r.Err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, err %v", len(got), err)
			}
		})
	}
}

func TestArtifactRepairAndLateChunks(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	data := []byte("abcdefghijklmnopqrstuvwxyz")
	sha := shaOf(data)
	parts := chunks(data, 2)
	mustOK(t, f, w.cmd(putChunk(sha, 0, 2, parts[0])))
	mustOK(t, f, w.cmd(putChunk(sha, 1, 2, []byte("garbage"))))
	if r := applyOne(t, f, w.cmd(commitArtifact(sha, uint64(len(data)), 2))); !errors.Is(r.Err, ErrArtifactChecksum) {
		t.Fatalf("commit with bad chunk: %v", r.Err)
	}
	// Re-sending the chunk repairs it.
	mustOK(t, f, w.cmd(putChunk(sha, 1, 2, parts[1])))
	mustOK(t, f, w.cmd(commitArtifact(sha, uint64(len(data)), 2)))
	// A late (even wrong) chunk after commit changes nothing.
	before := stateDigest(t, f)
	r := mustOK(t, f, w.cmd(putChunk(sha, 1, 2, []byte("garbage"))))
	if !r.Artifact.AlreadyCommitted {
		t.Fatalf("late chunk outcome %+v", r.Artifact)
	}
	if got, err := f.Artifact(sha); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("artifact after late chunk: %q %v", got, err)
	}
	if after := stateDigest(t, f); after != before {
		t.Fatalf("late chunk changed state")
	}
	// A chunk disagreeing on the total is refused.
	other := shaOf([]byte("other"))
	mustOK(t, f, w.cmd(putChunk(other, 0, 2, []byte("ot"))))
	if r := applyOne(t, f, w.cmd(putChunk(other, 1, 3, []byte("her")))); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("total mismatch: %v", r.Err)
	}
}

func TestDeployCompareAndSet(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	v1 := uploadArtifact(t, f, w, []byte("config v1"), 1)
	v2 := uploadArtifact(t, f, w, []byte("config v2"), 2)
	v3 := uploadArtifact(t, f, w, []byte("config v3"), 3)

	steps := []struct {
		name       string
		expect     uint64
		sha        string
		rollbackOf uint64
		wantErr    error
		wantRev    uint64
		noChange   bool
	}{
		{"first deploy needs expect 0", 1, v1, 0, ErrRevisionMismatch, 0, false},
		{"first deploy", 0, v1, 0, nil, 1, false},
		{"same sha again is a no-op", 1, v1, 0, nil, 1, true},
		{"retry with stale expect of current sha is a no-op", 0, v1, 0, nil, 1, true},
		{"stale expect", 0, v2, 0, ErrRevisionMismatch, 0, false},
		{"future expect", 5, v2, 0, ErrRevisionMismatch, 0, false},
		{"second deploy", 1, v2, 0, nil, 2, false},
		{"uncommitted artifact", 2, shaOf([]byte("never uploaded")), 0, ErrArtifactNotCommitted, 0, false},
		{"rollback to a revision with another sha", 2, v1, 2, ErrInvalid, 0, false},
		{"rollback to a revision that does not exist", 2, v1, 9, ErrInvalid, 0, false},
		{"rollback to revision 1", 2, v1, 1, nil, 3, false},
		{"third artifact", 3, v3, 0, nil, 4, false},
	}
	for _, s := range steps {
		before := stateDigest(t, f)
		r := applyOne(t, f, w.cmd(deploy("site", s.expect, s.sha, s.name, s.rollbackOf)))
		if !errors.Is(r.Err, s.wantErr) || (s.wantErr == nil) != (r.Err == nil) {
			t.Fatalf("%s: error %v, want %v", s.name, r.Err, s.wantErr)
		}
		if s.wantErr != nil {
			if after := stateDigest(t, f); after != before {
				t.Fatalf("%s: refused deploy changed state", s.name)
			}
			continue
		}
		if r.Deploy.Revision != s.wantRev || r.Deploy.NoChange != s.noChange || r.Deploy.SHA256 != s.sha {
			t.Fatalf("%s: outcome %+v, want revision %d noChange %v", s.name, r.Deploy, s.wantRev, s.noChange)
		}
	}

	d, err := f.Deployment("site")
	if err != nil {
		t.Fatal(err)
	}
	if d.Revision != 4 || d.SHA256 != v3 || len(d.History) != 4 {
		t.Fatalf("deployment %+v", d)
	}
	wantHistory := []struct {
		sha        string
		rollbackOf uint64
	}{{v1, 0}, {v2, 0}, {v1, 1}, {v3, 0}}
	for i, h := range d.History {
		if h.Revision != uint64(i+1) || h.SHA256 != wantHistory[i].sha || h.RollbackOf != wantHistory[i].rollbackOf || h.Actor != "test" || h.At.IsZero() {
			t.Fatalf("history[%d] = %+v", i, h)
		}
	}
	if _, err := f.Deployment("nowhere"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown target: %v", err)
	}
	entries, err := f.Audit(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	deploys := 0
	for _, e := range entries {
		if e.Kind == "deploy" {
			deploys++
		}
	}
	if deploys != 4 {
		t.Fatalf("%d deploy audit entries, want 4: %+v", deploys, entries)
	}
}

func TestDeployAcks(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	v1 := uploadArtifact(t, f, w, []byte("v1"), 1)
	v2 := uploadArtifact(t, f, w, []byte("v2"), 1)
	mustOK(t, f, w.cmd(deploy("site", 0, v1, "", 0)))
	mustOK(t, f, w.cmd(deploy("site", 1, v2, "", 0)))

	tests := []struct {
		name      string
		node      string
		rev       uint64
		ok        bool
		wantErr   error
		wantStale bool
	}{
		{"node a acks 2", "a", 2, true, nil, false},
		{"node b fails 2", "b", 2, false, nil, false},
		{"node a late ack of 1 is stale", "a", 1, true, nil, true},
		{"ack of a future revision", "a", 3, true, ErrInvalid, false},
		{"ack of revision 0", "a", 0, true, ErrInvalid, false},
	}
	for _, tt := range tests {
		r := applyOne(t, f, w.cmd(deployAck("site", tt.node, tt.rev, tt.ok, tt.name)))
		if !errors.Is(r.Err, tt.wantErr) || (tt.wantErr == nil) != (r.Err == nil) {
			t.Fatalf("%s: error %v, want %v", tt.name, r.Err, tt.wantErr)
		}
		if tt.wantErr == nil && r.Ack.Stale != tt.wantStale {
			t.Fatalf("%s: stale %v", tt.name, r.Ack.Stale)
		}
	}
	if r := applyOne(t, f, w.cmd(deployAck("nowhere", "a", 1, true, ""))); !errors.Is(r.Err, ErrUnknown) {
		t.Fatalf("ack for unknown target: %v", r.Err)
	}
	d, err := f.Deployment("site")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Acks) != 2 || d.Acks[0].NodeID != "a" || !d.Acks[0].OK || d.Acks[0].Revision != 2 ||
		d.Acks[1].NodeID != "b" || d.Acks[1].OK || d.Acks[1].Reason != "node b fails 2" {
		t.Fatalf("acks %+v", d.Acks)
	}
}

func TestClusterEpochOnlyIncreases(t *testing.T) {
	f, w := openTestFSM(t), newLogWriter(t)
	steps := []struct {
		epoch   uint64
		wantErr error
	}{{0, ErrEpochNotIncreasing}, {2, nil}, {2, ErrEpochNotIncreasing}, {1, ErrEpochNotIncreasing}, {7, nil}}
	for _, s := range steps {
		r := applyOne(t, f, w.cmd(setEpoch(s.epoch, "node-a", "peer silent")))
		if !errors.Is(r.Err, s.wantErr) || (s.wantErr == nil) != (r.Err == nil) {
			t.Fatalf("epoch %d: %v, want %v", s.epoch, r.Err, s.wantErr)
		}
	}
	if got := f.ClusterEpoch(); got != 7 {
		t.Fatalf("epoch %d", got)
	}
	entries, _ := f.Audit(0, 0)
	if len(entries) != 2 || entries[0].Kind != "override" || entries[1].Detail != "cluster epoch 2 -> 7 by node node-a: peer silent" {
		t.Fatalf("audit %+v", entries)
	}
	r := mustOK(t, f, w.cmd(audit("operator", "changed the fuses")))
	if r.Audit.Seq != 3 {
		t.Fatalf("audit seq %d", r.Audit.Seq)
	}
	after, _ := f.Audit(2, 10)
	if len(after) != 1 || after[0].Detail != "changed the fuses" || after[0].LogIndex != w.index {
		t.Fatalf("audit after 2: %+v", after)
	}
}
