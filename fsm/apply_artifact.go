package fsm

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/scadad/scadad/fsm/fsmpb"
)

func (a *applier) putArtifactChunk(c *fsmpb.PutArtifactChunk, res *Result) error {
	if e := checkSHA(c.Sha256); e != nil {
		res.Err = e
		return nil
	}
	switch {
	case c.Total == 0 || c.Total > MaxChunks:
		res.Err = cmdErr(CodeInvalid, "artifact %s: total chunks %d outside 1..%d", c.Sha256, c.Total, MaxChunks)
		return nil
	case c.Index >= c.Total:
		res.Err = cmdErr(CodeInvalid, "artifact %s: chunk index %d not below total %d", c.Sha256, c.Index, c.Total)
		return nil
	case len(c.Data) > MaxChunkBytes:
		res.Err = cmdErr(CodeInvalid, "artifact %s: chunk %d is %d bytes, limit %d", c.Sha256, c.Index, len(c.Data), MaxChunkBytes)
		return nil
	}
	key := []byte(c.Sha256)
	ab := a.artifacts.Bucket(key)
	if ab != nil {
		var info fsmpb.ArtifactState
		if _, err := getRecord(ab, artifactInfo, &info); err != nil {
			return err
		}
		if info.Committed {
			// Content-addressed and verified: a late chunk can only be a
			// retry, and must never alter what was verified.
			res.Artifact = &ArtifactOutcome{SHA256: c.Sha256, TotalChunks: info.TotalChunks, Committed: true, AlreadyCommitted: true}
			return nil
		}
		if info.TotalChunks != c.Total {
			res.Err = cmdErr(CodeInvalid, "artifact %s: chunk says %d chunks, earlier chunks said %d", c.Sha256, c.Total, info.TotalChunks)
			return nil
		}
	} else {
		var err error
		if ab, err = a.artifacts.CreateBucket(key); err != nil {
			return err
		}
		if err := a.putRecord(ab, artifactInfo, &fsmpb.ArtifactState{TotalChunks: c.Total}); err != nil {
			return err
		}
	}
	// A re-sent chunk overwrites: that is how a corrupted chunk is repaired
	// before commit.
	if err := ab.Put(chunkKey(c.Index), c.Data); err != nil {
		return err
	}
	res.Artifact = &ArtifactOutcome{SHA256: c.Sha256, TotalChunks: c.Total}
	return nil
}

func (a *applier) commitArtifact(c *fsmpb.CommitArtifact, res *Result) error {
	if e := checkSHA(c.Sha256); e != nil {
		res.Err = e
		return nil
	}
	ab := a.artifacts.Bucket([]byte(c.Sha256))
	if ab == nil {
		res.Err = cmdErr(CodeArtifactIncomplete, "artifact %s has no chunks", c.Sha256)
		return nil
	}
	var info fsmpb.ArtifactState
	if _, err := getRecord(ab, artifactInfo, &info); err != nil {
		return err
	}
	if info.Committed {
		if info.Size != c.Size || info.TotalChunks != c.TotalChunks {
			res.Err = cmdErr(CodeInvalid, "artifact %s is committed with %d bytes in %d chunks, not %d in %d", c.Sha256, info.Size, info.TotalChunks, c.Size, c.TotalChunks)
			return nil
		}
		res.Artifact = &ArtifactOutcome{SHA256: c.Sha256, TotalChunks: info.TotalChunks, Committed: true, AlreadyCommitted: true}
		return nil
	}
	if c.TotalChunks != info.TotalChunks {
		res.Err = cmdErr(CodeInvalid, "artifact %s: commit says %d chunks, chunks say %d", c.Sha256, c.TotalChunks, info.TotalChunks)
		return nil
	}
	h := sha256.New()
	var size uint64
	for i := uint32(0); i < info.TotalChunks; i++ {
		data := ab.Get(chunkKey(i))
		if data == nil {
			res.Err = cmdErr(CodeArtifactIncomplete, "artifact %s: chunk %d of %d missing", c.Sha256, i, info.TotalChunks)
			return nil
		}
		h.Write(data)
		size += uint64(len(data))
	}
	if size != c.Size {
		res.Err = cmdErr(CodeArtifactChecksum, "artifact %s: chunks hold %d bytes, commit says %d", c.Sha256, size, c.Size)
		return nil
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != c.Sha256 {
		res.Err = cmdErr(CodeArtifactChecksum, "artifact %s: chunks hash to %s", c.Sha256, got)
		return nil
	}
	info.Committed = true
	info.Size = size
	info.CommitStampUnixNano = a.cmd.StampUnixNano
	info.CommittedBy = a.cmd.Actor
	if err := a.putRecord(ab, artifactInfo, &info); err != nil {
		return err
	}
	res.Artifact = &ArtifactOutcome{SHA256: c.Sha256, TotalChunks: info.TotalChunks, Committed: true}
	return nil
}

// artifactCommitted reports whether sha is a committed artifact.
func (a *applier) artifactCommitted(sha string) (bool, error) {
	ab := a.artifacts.Bucket([]byte(sha))
	if ab == nil {
		return false, nil
	}
	var info fsmpb.ArtifactState
	if _, err := getRecord(ab, artifactInfo, &info); err != nil {
		return false, err
	}
	return info.Committed, nil
}
