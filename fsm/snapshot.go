package fsm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/atomicfile"
	"github.com/scadad/scadad/internal/boltsafe"
)

const (
	snapshotMagic = "SCADAFSM"
	// SnapshotFormat is the snapshot stream format this build writes (see
	// the package documentation); it reads formats 1 and 2. Format 2 adds
	// the state digest to the end marker.
	SnapshotFormat = 2
	// oldestSnapshotFormat is the oldest format this build reads.
	oldestSnapshotFormat = 1
	// frameSize is how much compressed data one frame carries; maxFrame is
	// the largest frame a reader accepts.
	frameSize = 256 << 10
	maxFrame  = 4 << 20
)

// Snapshot is a consistent, point-in-time view of the state, held open as a
// bbolt read transaction: writes continue while it is streamed. Release it.
type Snapshot struct {
	tx       *bolt.Tx
	meta     Meta
	release  sync.Once
	handBack func() // the FSM's handBack, for the digest
}

// Snapshot opens a snapshot for raft. raft calls it on the FSM goroutine, so
// the view matches exactly the last applied entry.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	// Raft would label a snapshot with its own applied index, past the
	// entry this node stopped at, and compact the log this node still
	// needs.
	if b := f.ApplyBlocked(); b != nil {
		return nil, fmt.Errorf("no snapshot while %w", b)
	}
	s, err := f.OpenSnapshot()
	if err != nil {
		return nil, err
	}
	return s, nil
}

// OpenSnapshot is Snapshot with its concrete type, for callers outside raft
// (backups).
func (f *FSM) OpenSnapshot() (*Snapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.db == nil {
		return nil, ErrClosed
	}
	// The file must hold everything the snapshot is taken at: raft may
	// compact its log up to it.
	if err := f.commitLocked(); err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	tx, err := f.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	return &Snapshot{tx: tx, meta: readMeta(tx), handBack: f.handBack()}, nil
}

// Backup writes a snapshot of the current state to w; the format is what
// Restore and InspectSnapshot read.
func (f *FSM) Backup(w io.Writer) (int64, error) {
	s, err := f.OpenSnapshot()
	if err != nil {
		return 0, err
	}
	defer s.Release()
	return s.WriteTo(w)
}

// Meta is the snapshot's bookkeeping (its applied index, epoch...).
func (s *Snapshot) Meta() Meta { return s.meta }

// WriteTo streams the snapshot in the documented format.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	var hdr [16]byte
	copy(hdr[:8], snapshotMagic)
	binary.BigEndian.PutUint32(hdr[8:12], SnapshotFormat)
	if _, err := cw.Write(hdr[:]); err != nil {
		return cw.n, fmt.Errorf("write snapshot header: %w", err)
	}
	fw := &frameWriter{w: cw, h: sha256.New(), buf: make([]byte, 0, frameSize)}
	// BestSpeed: a multi-GB buffer must stream at disk/network speed; the
	// free pages and repetitive records still compress well.
	gz, err := gzip.NewWriterLevel(fw, gzip.BestSpeed)
	if err != nil {
		return cw.n, err
	}
	path := s.tx.DB().Path()
	err = boltsafe.Guard(path, func() error {
		_, err := s.tx.WriteTo(gz)
		return err
	})
	if err != nil {
		return cw.n, fmt.Errorf("write snapshot body: %w", err)
	}
	if err := gz.Close(); err != nil {
		return cw.n, fmt.Errorf("finish snapshot compression: %w", err)
	}
	// The digest of the state the body holds, from the same transaction:
	// the receiver checks the state it decoded against it before use. A
	// state that cannot be walked whole is no snapshot.
	var digest []byte
	err = boltsafe.Guard(path, func() error {
		var err error
		digest, err = digestTxRaw(s.tx, s.handBack)
		return err
	})
	if err != nil {
		return cw.n, fmt.Errorf("%w: state %s cannot be read whole: %w", ErrDamagedState, path, err)
	}
	if err := fw.Close(digest); err != nil {
		return cw.n, fmt.Errorf("write snapshot trailer: %w", err)
	}
	return cw.n, nil
}

// Persist writes the snapshot to raft's sink.
func (s *Snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot at index %d: %w", s.meta.AppliedIndex, err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close snapshot sink at index %d: %w", s.meta.AppliedIndex, err)
	}
	return nil
}

// Release ends the read transaction. Safe to call more than once.
func (s *Snapshot) Release() {
	s.release.Do(func() { _ = s.tx.Rollback() })
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// frameWriter cuts the compressed body into length-prefixed frames and ends
// it with a zero frame, the total and the SHA-256 of all frame data.
type frameWriter struct {
	w     io.Writer
	h     hash.Hash
	buf   []byte
	total uint64
}

func (fw *frameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		take := min(frameSize-len(fw.buf), len(p))
		fw.buf = append(fw.buf, p[:take]...)
		p = p[take:]
		if len(fw.buf) == frameSize {
			if err := fw.emit(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (fw *frameWriter) emit() error {
	if len(fw.buf) == 0 {
		return nil
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(fw.buf)))
	if _, err := fw.w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := fw.w.Write(fw.buf); err != nil {
		return err
	}
	fw.h.Write(fw.buf)
	fw.total += uint64(len(fw.buf))
	fw.buf = fw.buf[:0]
	return nil
}

// Close ends the stream; stateDigest (format 2, nil for format 1) follows
// the body's SHA-256.
func (fw *frameWriter) Close(stateDigest []byte) error {
	if err := fw.emit(); err != nil {
		return err
	}
	end := make([]byte, 0, 4+8+2*sha256.Size)
	end = binary.BigEndian.AppendUint32(end, 0)
	end = binary.BigEndian.AppendUint64(end, fw.total)
	end = fw.h.Sum(end)
	end = append(end, stateDigest...)
	_, err := fw.w.Write(end)
	return err
}

// frameReader is the inverse of frameWriter. It returns io.EOF only after
// the end marker's total and digest matched; any other end is an error
// wrapping ErrSnapshotCorrupt. Errors are sticky.
type frameReader struct {
	r         io.Reader
	format    uint32
	h         hash.Hash
	remaining int
	total     uint64
	done      bool
	err       error
	sum       string
	// stateDigest is the end marker's state digest (format 2).
	stateDigest string
}

func (fr *frameReader) Read(p []byte) (int, error) {
	if fr.err != nil {
		return 0, fr.err
	}
	if fr.done {
		return 0, io.EOF
	}
	if fr.remaining == 0 {
		if err := fr.nextFrame(); err != nil {
			fr.err = err
			return 0, err
		}
		if fr.done {
			return 0, io.EOF
		}
	}
	if len(p) > fr.remaining {
		p = p[:fr.remaining]
	}
	n, err := fr.r.Read(p)
	fr.h.Write(p[:n])
	fr.remaining -= n
	fr.total += uint64(n)
	if err == io.EOF {
		if fr.remaining > 0 {
			fr.err = fmt.Errorf("%w: truncated inside a frame", ErrSnapshotCorrupt)
			return n, fr.err
		}
		err = nil
	}
	if err != nil {
		fr.err = fmt.Errorf("read snapshot: %w", err)
		return n, fr.err
	}
	return n, nil
}

func (fr *frameReader) nextFrame() error {
	var hdr [4]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return truncated(err, "frame header")
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > maxFrame {
		return fmt.Errorf("%w: frame of %d bytes, limit %d", ErrSnapshotCorrupt, size, maxFrame)
	}
	if size > 0 {
		fr.remaining = int(size)
		return nil
	}
	var end [8 + sha256.Size]byte
	if _, err := io.ReadFull(fr.r, end[:]); err != nil {
		return truncated(err, "end marker")
	}
	if total := binary.BigEndian.Uint64(end[:8]); total != fr.total {
		return fmt.Errorf("%w: end marker says %d body bytes, read %d", ErrSnapshotCorrupt, total, fr.total)
	}
	got := fr.h.Sum(nil)
	if !bytes.Equal(got, end[8:]) {
		return fmt.Errorf("%w: body SHA-256 %x, end marker says %x", ErrSnapshotCorrupt, got, end[8:])
	}
	fr.sum = hex.EncodeToString(got)
	if fr.format >= 2 {
		var digest [sha256.Size]byte
		if _, err := io.ReadFull(fr.r, digest[:]); err != nil {
			return truncated(err, "state digest")
		}
		fr.stateDigest = hex.EncodeToString(digest[:])
	}
	// Nothing may follow the end marker: bytes after it (or a second
	// snapshot) mean the file is not the snapshot it claims to be.
	var one [1]byte
	switch n, err := io.ReadFull(fr.r, one[:]); {
	case n > 0:
		return fmt.Errorf("%w: bytes after the end marker", ErrSnapshotCorrupt)
	case err != nil && !errors.Is(err, io.EOF):
		return fmt.Errorf("read snapshot after the end marker: %w", err)
	}
	fr.done = true
	return nil
}

func truncated(err error, where string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated at %s", ErrSnapshotCorrupt, where)
	}
	return fmt.Errorf("read snapshot %s: %w", where, err)
}

// streamInfo is what decoding a stream learns.
type streamInfo struct {
	format      uint32
	bodyBytes   uint64
	stateBytes  int64
	sha256      string
	stateDigest string // "" for format 1
}

// decodeSnapshot verifies a snapshot stream and writes the bbolt file it
// carries to dst. dst's content is only trustworthy when err is nil.
func decodeSnapshot(r io.Reader, dst io.Writer) (streamInfo, error) {
	var info streamInfo
	br := bufio.NewReaderSize(r, 1<<20)
	var hdr [16]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return info, truncated(err, "header")
	}
	if string(hdr[:8]) != snapshotMagic {
		return info, fmt.Errorf("%w: not a scadad snapshot (magic %q)", ErrSnapshotCorrupt, hdr[:8])
	}
	info.format = binary.BigEndian.Uint32(hdr[8:12])
	switch {
	case info.format > SnapshotFormat:
		return info, fmt.Errorf("%w: snapshot format %d, written by a newer scadad; this build (%s) reads formats %d..%d: restore it with that release",
			ErrSnapshotNewer, info.format, levelRelease(FeatureLevel), oldestSnapshotFormat, SnapshotFormat)
	case info.format < oldestSnapshotFormat:
		return info, fmt.Errorf("%w: snapshot format %d, this build reads %d..%d", ErrSnapshotCorrupt, info.format, oldestSnapshotFormat, SnapshotFormat)
	}
	fr := &frameReader{r: br, h: sha256.New(), format: info.format}
	gz, err := gzip.NewReader(fr)
	if err != nil {
		return info, fmt.Errorf("%w: body: %v", ErrSnapshotCorrupt, firstNonNil(fr.err, err))
	}
	gz.Multistream(false)
	n, err := io.Copy(dst, gz)
	if err != nil {
		return info, fmt.Errorf("%w: body: %v", ErrSnapshotCorrupt, firstNonNil(fr.err, err))
	}
	// The compressed stream ended; the end marker must follow at once.
	if extra, err := io.Copy(io.Discard, fr); err != nil {
		return info, err
	} else if extra != 0 {
		return info, fmt.Errorf("%w: %d bytes after the compressed body", ErrSnapshotCorrupt, extra)
	}
	info.bodyBytes, info.stateBytes, info.sha256, info.stateDigest = fr.total, n, fr.sum, fr.stateDigest
	return info, nil
}

func firstNonNil(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Restore replaces the state with a snapshot stream. The stream is written
// to a file beside the state file and verified (framing, digest, a bbolt file
// with this schema) before the swap; a corrupt or truncated stream is refused
// and the running state is untouched. Readers see the old state or the new,
// never a mix.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	// The snapshot holds the effects of the entry this node stopped at;
	// taking it in would skip that entry's meaning unseen.
	if b := f.ApplyBlocked(); b != nil {
		return fmt.Errorf("restore snapshot refused while %w", b)
	}
	tmp := f.path + ".restore"
	meta, err := f.prepareRestore(rc, tmp)
	if err != nil {
		_ = removeIfExists(tmp)
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if err := f.swapIn(tmp); err != nil {
		_ = removeIfExists(tmp)
		return fmt.Errorf("restore snapshot at index %d: %w", meta.AppliedIndex, err)
	}
	f.log.Info().Uint64("applied_index", meta.AppliedIndex).Uint64("cluster_epoch", meta.ClusterEpoch).Msg("fsm restored from snapshot")
	return nil
}

func (f *FSM) prepareRestore(r io.Reader, tmp string) (Meta, error) {
	if err := removeIfExists(tmp); err != nil {
		return Meta{}, fmt.Errorf("remove stale %s: %w", tmp, err)
	}
	stream, err := writeVerified(r, tmp)
	if err != nil {
		return Meta{}, err
	}
	var meta Meta
	// No hand-backs here: the file's maps are closed right after its
	// check and its digest, and releasing pages under them slowed a
	// restore by a third (pages mapped along with those read must be
	// faulted in again).
	err = withStateFile(tmp, f.opts, func(tx *bolt.Tx) error {
		meta = readMeta(tx)
		return checkStateDigest(tx, stream)
	})
	return meta, err
}

// writeVerified decodes a snapshot stream into a durable file at path.
func writeVerified(r io.Reader, path string) (streamInfo, error) {
	file, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return streamInfo{}, fmt.Errorf("create %s: %w", path, err)
	}
	bw := bufio.NewWriterSize(file, 1<<20)
	info, err := decodeSnapshot(r, bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	return info, err
}

// checkStateDigest compares a decoded state with the digest its snapshot
// carries (format 2).
func checkStateDigest(tx *bolt.Tx, stream streamInfo) error {
	if stream.stateDigest == "" {
		return nil
	}
	got, err := digestTx(tx)
	if err != nil {
		return fmt.Errorf("%w: state cannot be read whole: %v", ErrSnapshotCorrupt, err)
	}
	if got != stream.stateDigest {
		return fmt.Errorf("%w: the state holds digest %s, the snapshot says %s", ErrSnapshotCorrupt, got, stream.stateDigest)
	}
	return nil
}

// withStateFile opens a decoded state file read-only, checks it whole
// (bbolt's consistency check, every page read) and that it is a scadad state
// of a schema this build reads, and runs fn on it. A panic or fault of bbolt
// on it is an error wrapping ErrSnapshotCorrupt.
func withStateFile(path string, opts Options, fn func(tx *bolt.Tx) error) error {
	if err := boltsafe.Verify(context.Background(), path, boltsafe.Options{Full: true}); err != nil {
		return fmt.Errorf("%w: not a valid state file: %v", ErrSnapshotCorrupt, err)
	}
	err := boltsafe.Guard(path, func() error { return viewStateFile(path, opts, fn) })
	if errors.Is(err, boltsafe.ErrDamaged) {
		return fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	return err
}

func viewStateFile(path string, opts Options, fn func(tx *bolt.Tx) error) error {
	bo := opts.boltOptions(true)
	bo.InitialMmapSize = 0
	db, err := bolt.Open(path, 0o600, bo)
	if err != nil {
		return fmt.Errorf("%w: not a valid state file: %v", ErrSnapshotCorrupt, err)
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketArtifacts, bucketDeploy, bucketSF, bucketAudit} {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("%w: state has no %s bucket", ErrSnapshotCorrupt, name)
			}
		}
		switch v := getU64(tx.Bucket(bucketMeta).Get(metaSchema)); {
		case v == 0:
			return fmt.Errorf("%w: state has no schema version", ErrSnapshotCorrupt)
		case v > SchemaVersion:
			return fmt.Errorf("%w: the snapshot's state has schema version %d, written by a newer scadad; this build (%s) reads schema 1..%d: restore it with that release",
				ErrSnapshotNewer, v, levelRelease(FeatureLevel), SchemaVersion)
		}
		return fn(tx)
	})
}

// swapIn replaces the state file with the verified file at tmp.
func (f *FSM) swapIn(tmp string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.db == nil {
		return ErrClosed
	}
	// Committed first: if the new file cannot be put in place the old one
	// is reopened and must hold everything applied. A damaged file is not
	// worth committing to (the commit may panic on it again): what it lacks
	// is in the raft log, and the restore replaces it.
	if fe := f.fatal.Load(); fe != nil && errors.Is(*fe, ErrDamagedState) {
		f.txMu.Lock()
		if f.open != nil {
			_ = boltsafe.Guard(f.path, f.open.Rollback)
			f.open, f.openBytes = nil, 0
		}
		f.txMu.Unlock()
	} else if err := f.commitLocked(); err != nil {
		return err
	}
	// Close waits for open snapshots (read transactions) to be released;
	// a checkpoint digest of the old state is ended first.
	f.stopDigests()
	if err := f.db.Close(); err != nil {
		return fmt.Errorf("close state: %w", err)
	}
	f.db = nil
	renameErr := os.Rename(tmp, f.path)
	if renameErr == nil {
		renameErr = atomicfile.SyncDir(filepath.Dir(f.path))
	}
	db, err := openDB(f.path, f.opts)
	if err != nil {
		serr := &StorageError{Err: fmt.Errorf("reopen state after restore: %w", err)}
		f.storageFailure(serr)
		return serr
	}
	f.db = db
	if err := f.loadMeta(); err != nil {
		return err
	}
	if renameErr != nil {
		// The old state was reopened; nothing changed.
		return fmt.Errorf("replace state file: %w", renameErr)
	}
	f.restores.Add(1)
	// The damaged file a storage failure came from is gone: the restored
	// one was checked whole.
	if fe := f.fatal.Load(); fe != nil && errors.Is(*fe, ErrDamagedState) {
		f.fatal.Store(nil)
		f.log.Warn().Msg("the damaged state file was replaced by a restore; applying entries again")
	}
	f.notify(f.Meta().AppliedIndex)
	return nil
}

// SnapshotInfo describes a verified snapshot.
type SnapshotInfo struct {
	FormatVersion uint32
	// BodyBytes is the compressed body, StateBytes the bbolt file it holds.
	BodyBytes  uint64
	StateBytes int64
	// BodySHA256 is the verified digest of the compressed body.
	BodySHA256 string
	// Digest is the canonical state digest (see FSM.Digest).
	Digest string

	Meta                Meta
	Artifacts           int
	CommittedArtifacts  int
	DeployTargets       int
	SFTargets           int
	Pending             uint64
	Parked              uint64
	DeliveredTombstones int
	AuditEntries        uint64
}

// InspectSnapshot verifies a snapshot stream and describes it. It needs a
// temporary file (bbolt reads files, not streams) in os.TempDir.
func InspectSnapshot(r io.Reader) (SnapshotInfo, error) {
	dir, err := os.MkdirTemp("", "scadad-snapshot-inspect-")
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("inspect snapshot: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.db")
	stream, err := writeVerified(r, path)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("inspect snapshot: %w", err)
	}
	info := SnapshotInfo{FormatVersion: stream.format, BodyBytes: stream.bodyBytes, StateBytes: stream.stateBytes, BodySHA256: stream.sha256}
	err = withStateFile(path, Options{}, func(tx *bolt.Tx) error {
		if err := describeState(tx, &info); err != nil {
			return err
		}
		if stream.stateDigest != "" && info.Digest != stream.stateDigest {
			return fmt.Errorf("%w: the state holds digest %s, the snapshot says %s", ErrSnapshotCorrupt, info.Digest, stream.stateDigest)
		}
		return nil
	})
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("inspect snapshot: %w", err)
	}
	return info, nil
}

func describeState(tx *bolt.Tx, info *SnapshotInfo) error {
	info.Meta = readMeta(tx)
	info.AuditEntries = getU64(tx.Bucket(bucketMeta).Get(metaAuditSeq))
	err := tx.Bucket(bucketArtifacts).ForEach(func(k, _ []byte) error {
		var st fsmpb.ArtifactState
		if _, err := getRecord(tx.Bucket(bucketArtifacts).Bucket(k), artifactInfo, &st); err != nil {
			return err
		}
		info.Artifacts++
		if st.Committed {
			info.CommittedArtifacts++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketDeploy).ForEach(func(_, _ []byte) error { info.DeployTargets++; return nil }); err != nil {
		return err
	}
	sf := tx.Bucket(bucketSF)
	err = sf.Bucket(sfTargets).ForEach(func(_, v []byte) error {
		var c fsmpb.TargetCounters
		if err := unmarshalStored(v, &c); err != nil {
			return err
		}
		info.SFTargets++
		info.Pending += c.Pending
		info.Parked += c.Parked
		return nil
	})
	if err != nil {
		return err
	}
	info.DeliveredTombstones = sf.Bucket(sfDelivered).Stats().KeyN
	info.Digest, err = digestTx(tx)
	return err
}
