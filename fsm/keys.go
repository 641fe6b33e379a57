package fsm

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// SchemaVersion is the layout of the bbolt file this build reads and writes.
const SchemaVersion = 1

// Limits that keep every command's effects bounded and every key within
// bbolt's limits. They are part of the replicated semantics: changing one
// changes which commands are valid, so they are constants, not options.
const (
	// DeliveredTombstones is how many delivered (or discarded) message ids
	// are remembered so a late re-enqueue is recognised as a duplicate.
	DeliveredTombstones = 100_000
	// MaxBulk bounds the ids per SFDelivered/SFRetry/SFDiscard command and
	// the messages one all_of_target retry or discard moves.
	MaxBulk = 10_000
	// MaxEnqueueBatch bounds the messages per SFEnqueue command.
	MaxEnqueueBatch = 10_000
	// MaxIDBytes bounds message ids, targets, node ids and kinds.
	MaxIDBytes = 512
	// MaxPayloadBytes bounds one message payload.
	MaxPayloadBytes = 8 << 20
	// MaxChunkBytes bounds one artifact chunk.
	MaxChunkBytes = 16 << 20
	// MaxChunks bounds the chunks of one artifact.
	MaxChunks = 1 << 16
	// MaxTextBytes bounds free text (messages, reasons, audit details).
	MaxTextBytes = 64 << 10
)

var (
	bucketMeta      = []byte("meta")
	bucketArtifacts = []byte("artifacts")
	bucketDeploy    = []byte("deploy")
	bucketSF        = []byte("sf")
	bucketAudit     = []byte("audit")
	// bucketFeatures is new in v0.2.0 and additive: a v0.1.0 node ignores
	// it, so the schema version stays 1 (see migrate).
	bucketFeatures = []byte("features")

	// inside sf
	sfPending        = []byte("pending")
	sfParked         = []byte("parked")
	sfIDs            = []byte("ids")
	sfDelivered      = []byte("delivered")
	sfDeliveredOrder = []byte("delivered_order")
	sfTargets        = []byte("targets")

	// inside deploy/<target>
	deployPtr     = []byte("ptr")
	deployHistory = []byte("history")
	deployAcks    = []byte("acks")

	// inside artifacts/<sha>
	artifactInfo = []byte("info")

	metaAppliedIndex = []byte("applied_index")
	metaAppliedTerm  = []byte("applied_term")
	metaSchema       = []byte("schema_version")
	metaClusterEpoch = []byte("cluster_epoch")
	metaAuditSeq     = []byte("audit_seq")
	metaDeliveredSeq = []byte("delivered_seq")
)

// u64 is the key (and value) encoding of a number: big-endian, so keys
// sort by value.
func u64(v uint64) []byte { return appendU64(make([]byte, 0, 8), v) }

// appendU64 appends u64's encoding of v to dst.
func appendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

func getU64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func chunkKey(i uint32) []byte {
	k := make([]byte, 5)
	k[0] = 'c'
	binary.BigEndian.PutUint32(k[1:], i)
	return k
}

func unmarshalStored(v []byte, m proto.Message) error {
	if err := proto.Unmarshal(v, m); err != nil {
		return fmt.Errorf("decode stored %T: %w", m, err)
	}
	return nil
}
