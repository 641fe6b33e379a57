package fsm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/scadad/scadad/internal/boltsafe"
)

// Digest returns a SHA-256 over a canonical walk of every bucket, key and
// value. Two nodes that applied the same log have the same digest whatever
// their batch boundaries or file layout; operators and tests compare it.
func (f *FSM) Digest() (string, error) {
	var sum string
	err := f.viewCommitted(func(tx *bolt.Tx) error {
		return boltsafe.Guard(f.path, func() error {
			raw, err := digestTxRaw(tx, f.handBack())
			sum = hex.EncodeToString(raw)
			return err
		})
	})
	if err != nil {
		return "", fmt.Errorf("digest of the state %s: %w", f.path, err)
	}
	return sum, nil
}

func digestTx(tx *bolt.Tx) (string, error) {
	sum, err := digestTxRaw(tx, nil)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum), nil
}

// digestTxRaw digests tx; handBack, when set, is called every
// walkReleaseBytes read and at the end (see FSM.handBack).
func digestTxRaw(tx *bolt.Tx, handBack func()) ([]byte, error) {
	return digestTxPaced(context.Background(), tx, nil, handBack)
}

// digestTxCtx is digestTx ended by ctx and paced to at most cpuShare of
// one core (0 or 1 and above: unbounded), handing pages back as
// digestTxRaw does.
func digestTxCtx(ctx context.Context, tx *bolt.Tx, cpuShare float64, handBack func()) (string, error) {
	sum, err := digestTxPaced(ctx, tx, newDutyCycle(cpuShare, time.Now, sleepCtx), handBack)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum), nil
}

func digestTxPaced(ctx context.Context, tx *bolt.Tx, pace *dutyCycle, handBack func()) ([]byte, error) {
	w := &digestWalk{h: sha256.New(), ctx: ctx, pace: pace, handBack: handBack}
	err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		return w.bucket(0, name, b)
	})
	if handBack != nil {
		handBack()
	}
	if err != nil {
		return nil, err
	}
	return w.h.Sum(nil), nil
}

// walkReleaseBytes is how much a walk of the whole state reads through the
// map between two hand-backs of its pages: the resident size a digest
// adds, where a walk of a multi-GB buffer would otherwise add the file.
const walkReleaseBytes = 1 << 20

// digestWalk hashes buckets, checking ctx and pausing for the pace every
// few hundred keys, and handing back the pages it has read every
// walkReleaseBytes.
type digestWalk struct {
	h        hash.Hash
	ctx      context.Context
	pace     *dutyCycle
	keys     int
	handBack func()
	read     int
}

func (w *digestWalk) bucket(depth uint32, name []byte, b *bolt.Bucket) error {
	writeField(w.h, 'B', depth, name)
	err := b.ForEach(func(k, v []byte) error {
		if w.keys++; w.keys%256 == 0 {
			if err := w.ctx.Err(); err != nil {
				return err
			}
			if err := w.pace.pause(w.ctx); err != nil {
				return err
			}
		}
		if v == nil {
			return w.bucket(depth+1, k, b.Bucket(k))
		}
		writeField(w.h, 'K', depth, k)
		writeField(w.h, 'V', depth, v)
		if w.read += len(k) + len(v); w.read >= walkReleaseBytes && w.handBack != nil {
			w.read = 0
			w.handBack()
		}
		return nil
	})
	writeField(w.h, 'E', depth, nil)
	return err
}

// digestBucket hashes one bucket without pacing (tests).
func digestBucket(h hash.Hash, depth uint32, name []byte, b *bolt.Bucket) error {
	w := &digestWalk{h: h, ctx: context.Background()}
	return w.bucket(depth, name, b)
}

// writeField length-prefixes every field so no two walks hash alike.
func writeField(h hash.Hash, tag byte, depth uint32, data []byte) {
	var hdr [13]byte
	hdr[0] = tag
	binary.BigEndian.PutUint32(hdr[1:5], depth)
	binary.BigEndian.PutUint64(hdr[5:], uint64(len(data)))
	h.Write(hdr[:])
	h.Write(data)
}
