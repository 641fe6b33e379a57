package fsm

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/scadad/scadad/fsm/fsmpb"
)

func openTestFSM(t testing.TB) *FSM {
	t.Helper()
	f := openTestFSMAt(t, filepath.Join(t.TempDir(), "state.db"))
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// openTestFSMAt opens the state file at path for a test that closes it
// itself (to reopen it, or to change it under the FSM).
func openTestFSMAt(t testing.TB, path string) *FSM {
	t.Helper()
	f, err := Open(path, Options{Logger: zerolog.Nop(), NoSync: true})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return f
}

// logWriter hands out consecutive log entries the way a leader would.
type logWriter struct {
	t     testing.TB
	index uint64
	term  uint64
	stamp int64
}

func newLogWriter(t testing.TB) *logWriter {
	return &logWriter{t: t, term: 1, stamp: 1_700_000_000_000_000_000}
}

func (w *logWriter) raw(data []byte) *raft.Log {
	w.index++
	return &raft.Log{Index: w.index, Term: w.term, Type: raft.LogCommand, Data: data}
}

// cmd encodes a command with the next leader stamp.
func (w *logWriter) cmd(c *fsmpb.Command) *raft.Log {
	w.t.Helper()
	w.stamp += 1_000_000
	if c.StampUnixNano == 0 {
		c.StampUnixNano = w.stamp
	}
	if c.Actor == "" {
		c.Actor = "test"
	}
	data, err := Encode(c)
	if err != nil {
		w.t.Fatalf("encode %v: %v", c, err)
	}
	return w.raw(data)
}

func applyOne(t testing.TB, f *FSM, l *raft.Log) *Result {
	t.Helper()
	r, ok := f.Apply(l).(*Result)
	if !ok {
		t.Fatalf("Apply returned %T", f.Apply(l))
	}
	if _, storage := r.Err.(*StorageError); storage {
		t.Fatalf("entry %d: storage error %v", l.Index, r.Err)
	}
	return r
}

func mustOK(t testing.TB, f *FSM, l *raft.Log) *Result {
	t.Helper()
	r := applyOne(t, f, l)
	if r.Err != nil {
		t.Fatalf("entry %d: unexpected error %v", l.Index, r.Err)
	}
	return r
}

func digest(t testing.TB, f *FSM) string {
	t.Helper()
	d, err := f.Digest()
	if err != nil {
		t.Fatalf("digest: %v", err)
	}
	return d
}

func shaOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Command constructors.

func noop() *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_Noop{Noop: &fsmpb.Noop{}}}
}

func putChunk(sha string, index, total uint32, data []byte) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_PutArtifactChunk{PutArtifactChunk: &fsmpb.PutArtifactChunk{Sha256: sha, Index: index, Total: total, Data: data}}}
}

func commitArtifact(sha string, size uint64, total uint32) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_CommitArtifact{CommitArtifact: &fsmpb.CommitArtifact{Sha256: sha, Size: size, TotalChunks: total}}}
}

func deploy(target string, expect uint64, sha, msg string, rollbackOf uint64) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_Deploy{Deploy: &fsmpb.Deploy{Target: target, ExpectRevision: expect, Sha256: sha, Message: msg, RollbackOf: rollbackOf}}}
}

func deployAck(target, node string, rev uint64, ok bool, reason string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_DeployAck{DeployAck: &fsmpb.DeployAck{Target: target, NodeId: node, Revision: rev, Ok: ok, Reason: reason}}}
}

func msg(id, target, payload string) *fsmpb.Message {
	return &fsmpb.Message{Id: id, Target: target, Payload: []byte(payload), Headers: []*fsmpb.KV{{Key: "content-type", Value: "text/plain"}}}
}

func enqueue(msgs ...*fsmpb.Message) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_SfEnqueue{SfEnqueue: &fsmpb.SFEnqueue{Messages: msgs}}}
}

func delivered(ids ...string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_SfDelivered{SfDelivered: &fsmpb.SFDelivered{Ids: ids}}}
}

func park(id, reason string, attempts uint32) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_SfPark{SfPark: &fsmpb.SFPark{Id: id, Reason: reason, Attempts: attempts}}}
}

func retry(target string, ids ...string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_SfRetry{SfRetry: &fsmpb.SFRetry{Ids: ids, AllOfTarget: target}}}
}

func discard(target, reason string, ids ...string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_SfDiscard{SfDiscard: &fsmpb.SFDiscard{Ids: ids, AllOfTarget: target, Reason: reason}}}
}

func audit(kind, detail string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_Audit{Audit: &fsmpb.Audit{Kind: kind, Detail: detail}}}
}

func setEpoch(epoch uint64, node, reason string) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_SetClusterEpoch{SetClusterEpoch: &fsmpb.SetClusterEpoch{Epoch: epoch, NodeId: node, Reason: reason}}}
}

// chunks cuts data into n nearly equal chunks.
func chunks(data []byte, n int) [][]byte {
	out := make([][]byte, n)
	size := (len(data) + n - 1) / n
	for i := range out {
		lo, hi := min(i*size, len(data)), min((i+1)*size, len(data))
		out[i] = data[lo:hi]
	}
	return out
}

// uploadArtifact stores and commits data in n chunks.
func uploadArtifact(t testing.TB, f *FSM, w *logWriter, data []byte, n int) string {
	t.Helper()
	sha := shaOf(data)
	for i, c := range chunks(data, n) {
		mustOK(t, f, w.cmd(putChunk(sha, uint32(i), uint32(n), c)))
	}
	r := mustOK(t, f, w.cmd(commitArtifact(sha, uint64(len(data)), uint32(n))))
	if r.Artifact == nil || !r.Artifact.Committed {
		t.Fatalf("commit of %s: %+v", sha, r.Artifact)
	}
	return sha
}

// stateDigest digests every bucket except meta: what a refused command must
// leave unchanged (it still advances the applied index in meta).
func stateDigest(t testing.TB, f *FSM) string {
	t.Helper()
	h := sha256.New()
	err := f.view(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if string(name) == string(bucketMeta) {
				return nil
			}
			return digestBucket(h, 0, name, b)
		})
	})
	if err != nil {
		t.Fatalf("state digest: %v", err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func newSHA() hash.Hash { return sha256.New() }

func newGzip(w io.Writer) *gzip.Writer { return gzip.NewWriter(w) }

func protoMarshal(m proto.Message) ([]byte, error) { return proto.Marshal(m) }

func attempts(entries ...*fsmpb.SFAttempt) *fsmpb.Command {
	return &fsmpb.Command{Body: &fsmpb.Command_SfAttempts{SfAttempts: &fsmpb.SFAttempts{Attempts: entries}}}
}
