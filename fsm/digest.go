package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"

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
			var err error
			sum, err = digestTx(tx)
			return err
		})
	})
	if err != nil {
		return "", fmt.Errorf("digest of the state %s: %w", f.path, err)
	}
	return sum, nil
}

func digestTx(tx *bolt.Tx) (string, error) {
	sum, err := digestTxRaw(tx)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum), nil
}

func digestTxRaw(tx *bolt.Tx) ([]byte, error) {
	h := sha256.New()
	err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		return digestBucket(h, 0, name, b)
	})
	if err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

func digestBucket(h hash.Hash, depth uint32, name []byte, b *bolt.Bucket) error {
	writeField(h, 'B', depth, name)
	err := b.ForEach(func(k, v []byte) error {
		if v == nil {
			return digestBucket(h, depth+1, k, b.Bucket(k))
		}
		writeField(h, 'K', depth, k)
		writeField(h, 'V', depth, v)
		return nil
	})
	writeField(h, 'E', depth, nil)
	return err
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
