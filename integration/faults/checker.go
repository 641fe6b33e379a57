package faults

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// ---- store-and-forward ----

// enqueueOp is one message a workload client tried to enqueue.
type enqueueOp struct {
	ID       string    `json:"id"`
	Node     string    `json:"node"`
	Invoke   time.Time `json:"invoke"`
	Return   time.Time `json:"return"`
	Acked    bool      `json:"acked"`
	Attempts int       `json:"attempts"`
}

// delivery is one request the sink recorded.
type delivery struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	ID     string    `json:"id"`
	Epoch  string    `json:"epoch"`
	SHA256 string    `json:"sha256"`
	Status int       `json:"status"`
}

// payloadFor is what a client sends for id; the sink's digest of a
// delivery must match the digest of its id's payload.
func payloadFor(id string) []byte { return []byte("payload-of-" + id) }

func payloadSHA(id string) string {
	sum := sha256.Sum256(payloadFor(id))
	return hex.EncodeToString(sum[:])
}

// deliveryResult is what the delivery checker found.
type deliveryResult struct {
	Attempted int `json:"attempted"`
	Acked     int `json:"acked"`
	Delivered int `json:"delivered_unique"`
	// Pending and Parked are acknowledged messages still in the buffer.
	Pending int `json:"pending"`
	Parked  int `json:"parked"`
	// Lost are acknowledged messages neither delivered nor buffered.
	Lost    int      `json:"lost"`
	LostIDs []string `json:"lost_ids,omitempty"`
	// Duplicates counts deliveries beyond the first of an id; DupIDs how
	// many ids were delivered more than once.
	Duplicates int `json:"duplicates"`
	DupIDs     int `json:"dup_ids"`
	// Foreign are 2xx deliveries whose id no client sent, or whose body is
	// not the body sent under that id: a duplicate that lost its identity.
	Foreign    int      `json:"foreign"`
	ForeignIDs []string `json:"foreign_ids,omitempty"`
	// UnackedDelivered are messages the client never saw acknowledged but
	// that were delivered (allowed: the ack was lost, the commit was not).
	UnackedDelivered int `json:"unacked_delivered"`
}

// checkDeliveries compares what clients were promised with what the sink
// received and what is still buffered (ids in buffered, parked or not).
func checkDeliveries(ops []enqueueOp, deliveries []delivery, pending, parked map[string]bool) deliveryResult {
	var r deliveryResult
	sent := map[string]bool{}
	acked := map[string]bool{}
	for _, op := range ops {
		r.Attempted++
		sent[op.ID] = true
		if op.Acked {
			acked[op.ID] = true
		}
	}
	r.Acked = len(acked)
	seen := map[string]int{}
	for _, d := range deliveries {
		if d.Status < 200 || d.Status > 299 {
			continue
		}
		if !sent[d.ID] || d.SHA256 != payloadSHA(d.ID) {
			r.Foreign++
			if len(r.ForeignIDs) < 20 {
				r.ForeignIDs = append(r.ForeignIDs, d.ID)
			}
			continue
		}
		seen[d.ID]++
	}
	r.Delivered = len(seen)
	for id, n := range seen {
		if n > 1 {
			r.Duplicates += n - 1
			r.DupIDs++
		}
		if !acked[id] {
			r.UnackedDelivered++
		}
	}
	ids := make([]string, 0, len(acked))
	for id := range acked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		switch {
		case seen[id] > 0:
		case parked[id]:
			r.Parked++
		case pending[id]:
			r.Pending++
		default:
			r.Lost++
			if len(r.LostIDs) < 50 {
				r.LostIDs = append(r.LostIDs, id)
			}
		}
	}
	return r
}

// ---- deploy pointer compare-and-set ----

// casOp is one deploy push with --expect-revision, or the final read.
type casOp struct {
	Client int       `json:"client"`
	Read   bool      `json:"read,omitempty"`
	Expect uint64    `json:"expect"`
	SHA    string    `json:"sha"` // what the push tried to install (or the read saw)
	Invoke time.Time `json:"invoke"`
	Return time.Time `json:"return"`
	// Outcome: ok, mismatch, or unknown (timeout, unreachable, crash).
	Outcome  string `json:"outcome"`
	Revision uint64 `json:"revision"` // the revision the reply named
	Detail   string `json:"detail,omitempty"`
}

const (
	outcomeOK       = "ok"
	outcomeMismatch = "mismatch"
	outcomeUnknown  = "unknown"
)

// pointer is the register the deploy pointer is.
type pointer struct {
	Rev uint64
	SHA string
}

// newPointerModel is a register with compare-and-set on the revision. A
// push of the content already current is a no-op that answers ok with the
// current revision (the FSM checks that before the revision: a retried
// push hears "done"). An unknown outcome may or may not have happened.
func newPointerModel(initial pointer) porcupine.Model {
	nd := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{initial} },
		Step: func(state, input, output interface{}) []interface{} {
			s := state.(pointer)
			in := input.(casOp)
			out := output.(casOp)
			if in.Read {
				if out.Revision == s.Rev && out.SHA == s.SHA {
					return []interface{}{s}
				}
				return nil
			}
			var applied pointer
			canApply := false
			switch {
			case s.SHA == in.SHA:
				applied, canApply = s, true
			case s.Rev == in.Expect:
				applied, canApply = pointer{Rev: in.Expect + 1, SHA: in.SHA}, true
			}
			switch out.Outcome {
			case outcomeOK:
				if canApply && out.Revision == applied.Rev {
					return []interface{}{applied}
				}
				return nil
			case outcomeMismatch:
				if !canApply {
					return []interface{}{s}
				}
				return nil
			default: // unknown: either it took effect or it did not
				if canApply {
					return []interface{}{s, applied}
				}
				return []interface{}{s}
			}
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(casOp), output.(casOp)
			if in.Read {
				return fmt.Sprintf("read → %d/%.8s", out.Revision, out.SHA)
			}
			return fmt.Sprintf("cas(expect %d, %.8s) → %s %d", in.Expect, in.SHA, out.Outcome, out.Revision)
		},
		DescribeState: func(state interface{}) string {
			s := state.(pointer)
			return fmt.Sprintf("%d/%.8s", s.Rev, s.SHA)
		},
	}
	return nd.ToModel()
}

// casResult is what the linearizability checker found.
type casResult struct {
	Ops          int    `json:"ops"`
	OK           int    `json:"ok"`
	Mismatch     int    `json:"mismatch"`
	Unknown      int    `json:"unknown"`
	Linearizable string `json:"linearizable"` // Ok, Illegal or Unknown (checker timeout)
	Violations   int    `json:"violations"`
	// HistoryProblems are contradictions between the acknowledged pushes
	// and the pointer's own recorded history.
	HistoryProblems []string `json:"history_problems,omitempty"`
	// SupersededByHeal counts pushes acknowledged by the losing side of a
	// pair split, which the heal recorded as superseded (left out of the
	// checks above).
	SupersededByHeal int `json:"superseded_by_heal"`
}

// checkCAS runs porcupine over the operations. Unknown outcomes get a
// return time after everything else: they may take effect any time later.
func checkCAS(initial pointer, ops []casOp, timeout time.Duration) (casResult, porcupine.LinearizationInfo) {
	var r casResult
	var hist []porcupine.Operation
	for _, op := range ops {
		ret := op.Return.UnixNano()
		if !op.Read {
			r.Ops++
			switch op.Outcome {
			case outcomeOK:
				r.OK++
			case outcomeMismatch:
				r.Mismatch++
			default:
				r.Unknown++
				ret = math.MaxInt64
			}
		}
		in := op
		in.Outcome, in.Revision = "", 0
		hist = append(hist, porcupine.Operation{ClientId: op.Client, Input: in, Call: op.Invoke.UnixNano(), Output: op, Return: ret})
	}
	res, info := porcupine.CheckOperationsVerbose(newPointerModel(initial), hist, timeout)
	r.Linearizable = string(res)
	if res == porcupine.Illegal {
		r.Violations = 1
	}
	return r, info
}

// checkPointerHistory cross-checks acknowledged pushes against the
// recorded history (revision → sha): an acknowledged push must be there
// under the revision it was told, and every recorded revision after the
// initial one must be the content of some push.
func checkPointerHistory(initial pointer, ops []casOp, history map[uint64]string) []string {
	var problems []string
	pushed := map[string]bool{initial.SHA: true}
	for _, op := range ops {
		if op.Read {
			continue
		}
		pushed[op.SHA] = true
		if op.Outcome == outcomeOK && history[op.Revision] != op.SHA {
			problems = append(problems, fmt.Sprintf("push of %.12s acknowledged as revision %d, but history has %.12s there", op.SHA, op.Revision, history[op.Revision]))
		}
	}
	revs := make([]uint64, 0, len(history))
	for rev := range history {
		revs = append(revs, rev)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	for _, rev := range revs {
		if rev > initial.Rev && !pushed[history[rev]] {
			problems = append(problems, fmt.Sprintf("revision %d holds %.12s, which no client pushed", rev, history[rev]))
		}
	}
	return problems
}

// ---- roles ----

// roleSample is one GET /health/active.
type roleSample struct {
	Node  string    `json:"node"`
	Send  time.Time `json:"send"`
	Recv  time.Time `json:"recv"`
	OK    bool      `json:"ok"` // the node answered
	Role  string    `json:"role,omitempty"`
	Epoch string    `json:"epoch,omitempty"`
}

// activeSpan is a stretch of consecutive Active samples of one node under
// one epoch. [From, To] is when it was certainly Active (from the reply to
// its first sample to the sending of its last); Outer is the widest it may
// have been (from the last non-active sample's reply to the next one's
// sending).
type activeSpan struct {
	Node     string    `json:"node"`
	Epoch    string    `json:"epoch"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	OuterEnd time.Time `json:"-"`
}

// activeSpans folds the samples into spans, per node.
func activeSpans(samples []roleSample) []activeSpan {
	byNode := map[string][]roleSample{}
	var nodes []string
	for _, s := range samples {
		if _, ok := byNode[s.Node]; !ok {
			nodes = append(nodes, s.Node)
		}
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	sort.Strings(nodes)
	var out []activeSpan
	for _, n := range nodes {
		ss := byNode[n]
		sort.Slice(ss, func(i, j int) bool { return ss[i].Send.Before(ss[j].Send) })
		var cur *activeSpan
		for _, s := range ss {
			active := s.OK && s.Role == "active"
			if cur != nil && (!active || s.Epoch != cur.Epoch) {
				cur.OuterEnd = s.Send
				out = append(out, *cur)
				cur = nil
			}
			if active {
				if cur == nil {
					cur = &activeSpan{Node: n, Epoch: s.Epoch, From: s.Recv, To: s.Send}
				} else {
					cur.To = s.Send
				}
			}
		}
		if cur != nil {
			cur.OuterEnd = cur.To
			out = append(out, *cur)
		}
	}
	return out
}

// overlap is a time in which two nodes were both certainly Active.
type overlap struct {
	A         string        `json:"a"`
	B         string        `json:"b"`
	EpochA    string        `json:"epoch_a"`
	EpochB    string        `json:"epoch_b"`
	From      time.Time     `json:"from"`
	Length    time.Duration `json:"length_ns"`
	SameEpoch bool          `json:"same_epoch"`
}

// activeOverlaps finds every pair of spans of different nodes that
// certainly overlapped, and every epoch claimed Active by two nodes (at
// any time: Raft allows one leader per term).
func activeOverlaps(spans []activeSpan) []overlap {
	var out []overlap
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			a, b := spans[i], spans[j]
			if a.Node == b.Node {
				continue
			}
			from, to := later(a.From, b.From), earlier(a.To, b.To)
			o := overlap{A: a.Node, B: b.Node, EpochA: a.Epoch, EpochB: b.Epoch, From: from, SameEpoch: a.Epoch == b.Epoch}
			if to.After(from) {
				o.Length = to.Sub(from)
			}
			if o.Length > 0 || o.SameEpoch {
				out = append(out, o)
			}
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// failoverTime is how long after start a node first answered Active under
// an epoch other than before; ok is false if none did by end.
func failoverTime(samples []roleSample, before string, start, end time.Time) (time.Duration, bool) {
	var best time.Time
	for _, s := range samples {
		if !s.OK || s.Role != "active" || s.Epoch == before || s.Recv.Before(start) || s.Recv.After(end) {
			continue
		}
		if best.IsZero() || s.Recv.Before(best) {
			best = s.Recv
		}
	}
	if best.IsZero() {
		return 0, false
	}
	return best.Sub(start), true
}

// activeIn reports whether a node answered Active in epoch within
// [from, end].
func activeIn(samples []roleSample, epoch string, from, end time.Time) bool {
	for _, s := range samples {
		if s.OK && s.Role == "active" && s.Epoch == epoch && !s.Recv.Before(from) && !s.Recv.After(end) {
			return true
		}
	}
	return false
}

// durationStats summarises failover times.
type durationStats struct {
	N      int           `json:"n"`
	Min    time.Duration `json:"min_ns"`
	Median time.Duration `json:"median_ns"`
	P99    time.Duration `json:"p99_ns"`
	Max    time.Duration `json:"max_ns"`
}

func summarize(ds []time.Duration) durationStats {
	if len(ds) == 0 {
		return durationStats{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		if i < 0 {
			i = 0
		}
		return s[i]
	}
	return durationStats{N: len(s), Min: s[0], Median: q(0.5), P99: q(0.99), Max: s[len(s)-1]}
}

func (d durationStats) String() string {
	if d.N == 0 {
		return "none measured"
	}
	r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	return fmt.Sprintf("n=%d min=%s median=%s p99=%s max=%s", d.N, r(d.Min), r(d.Median), r(d.P99), r(d.Max))
}
