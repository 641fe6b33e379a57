package heal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
)

// Audit kinds the heal writes.
const (
	KindSplitDetected    = "heal.split_detected"
	KindBegin            = "heal.begin"
	KindDeploySuperseded = "heal.deploy_superseded"
	KindPeerAudit        = "heal.peer_audit"
	KindMerged           = "heal.merged"
)

// Errors the winner answers with.
var (
	// ErrNotWinner: this side's rule does not make it the winner (or it is
	// not Active), so it refuses the merge.
	ErrNotWinner = errors.New("heal: this node is not the winner of the split")
	// ErrUnknownMerge: a hand-over call for a merge this side never began.
	ErrUnknownMerge = errors.New("heal: unknown merge id")
)

// Proposer commits a command on the leader (control.Forwarder).
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error)
}

// State is the FSM read side the heal uses.
type State interface {
	Meta() fsm.Meta
	SFTargets() ([]string, error)
	SFPending(target string, afterSeq uint64, limit int) ([]fsm.Message, error)
	SFParkedAfter(target string, afterSeq uint64, limit int) ([]fsm.Message, error)
	SFFinishedAfter(afterSeq uint64, limit int) ([]fsm.FinishedID, error)
	SFLookup(id string) (fsm.MessageState, error)
	DeployTargets() ([]string, error)
	Deployment(target string) (fsm.Deployment, error)
	Audit(afterSeq uint64, limit int) ([]fsm.AuditEntry, error)
	AuditNewestFirst(fn func(fsm.AuditEntry) bool) error
}

// Message is one message handed over.
type Message struct {
	ID, Target string
	Payload    []byte
	Headers    []fsm.Header
	Parked     bool
}

// Record is one split-era deploy or audit entry of the loser.
type Record struct {
	Kind   string // "deploy" or "audit"
	Key    string // unique within the merge
	At     time.Time
	Actor  string
	Detail string
}

// Counts is what one absorb call changed.
type Counts struct{ Added, Duplicates int }

// Absorber is the winner's side of a merge. Every method is idempotent:
// the loser repeats whatever it is not sure arrived.
type Absorber struct {
	Self     string
	State    State
	Proposer Proposer
	// Facts returns this node's own facts (Manager.Facts).
	Facts func(ctx context.Context) (Facts, error)
	// OnSplit, when set, is told of the split a new merge heals
	// (Manager.NoteSplit): the loser may decide, hand over and rejoin
	// before this side's own probe has seen the peer Active, and the split
	// must still be logged, counted and audited here.
	OnSplit func(ctx context.Context, self, loser Facts, v Verdict)
	Log     zerolog.Logger
	Now     func() time.Time
}

func (a *Absorber) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

func (a *Absorber) propose(ctx context.Context, actor string, body func(*fsmpb.Command)) (*fsm.Result, error) {
	cmd := &fsmpb.Command{Version: fsm.CommandVersion, StampUnixNano: a.now().UnixNano(), Actor: actor}
	body(cmd)
	res, err := a.Proposer.Propose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

func (a *Absorber) audit(ctx context.Context, mergeID, kind, detail string) error {
	if len(detail) > fsm.MaxTextBytes {
		detail = detail[:fsm.MaxTextBytes-3] + "..."
	}
	_, err := a.propose(ctx, "heal:"+mergeID, func(c *fsmpb.Command) {
		c.Body = &fsmpb.Command_Audit{Audit: &fsmpb.Audit{Kind: kind, Detail: detail}}
	})
	if err != nil {
		return fmt.Errorf("record %s: %w", kind, err)
	}
	return nil
}

// mergePrefix starts every audit detail of one merge.
func mergePrefix(mergeID string) string { return "merge " + mergeID + ": " }

// mergeEntries returns the details of this merge's audit entries, newest
// first, and whether its heal.begin entry exists. It scans back only to
// that entry.
func (a *Absorber) mergeEntries(mergeID string) (details []string, begun bool, err error) {
	prefix := mergePrefix(mergeID)
	err = a.State.AuditNewestFirst(func(e fsm.AuditEntry) bool {
		if !strings.HasPrefix(e.Detail, prefix) {
			return true
		}
		if e.Kind == KindBegin {
			begun = true
			return false
		}
		details = append(details, e.Detail)
		return true
	})
	return details, begun, err
}

func (a *Absorber) requireBegun(mergeID string) error {
	_, begun, err := a.mergeEntries(mergeID)
	if err != nil {
		return err
	}
	if !begun {
		return fmt.Errorf("%w %q", ErrUnknownMerge, mergeID)
	}
	return nil
}

// Begin accepts a merge from loser if the rule, evaluated here with this
// side's own facts, makes this node the winner, and records it. A merge
// already begun is accepted again (resumed) without re-deciding: the
// winner's own facts change as the merge commits (its epoch bump).
func (a *Absorber) Begin(ctx context.Context, mergeID string, loser Facts) (self Facts, resumed bool, err error) {
	if mergeID == "" || !strings.HasPrefix(mergeID, loser.NodeID+"-") {
		return Facts{}, false, fmt.Errorf("heal begin: merge id %q must start with the loser's id %q", mergeID, loser.NodeID)
	}
	self, err = a.Facts(ctx)
	if err != nil {
		return Facts{}, false, fmt.Errorf("heal begin: own facts: %w", err)
	}
	if !self.Active {
		return self, false, fmt.Errorf("%w: it is not Active", ErrNotWinner)
	}
	if slices.Contains(self.Voters, loser.NodeID) {
		return self, false, fmt.Errorf("%w: %s is a voter of this cluster already (no split)", ErrNotWinner, loser.NodeID)
	}
	_, begun, err := a.mergeEntries(mergeID)
	if err != nil {
		return self, false, fmt.Errorf("heal begin: %w", err)
	}
	if begun {
		return self, true, nil
	}
	v := Decide(self, loser)
	if v.Winner != a.Self {
		return self, false, fmt.Errorf("%w: the rule picks %s (%s)", ErrNotWinner, v.Winner, v.Reason)
	}
	detail := fmt.Sprintf("%snode %s hands its split-era work to %s (winner because %s; loser epoch %d, override at index %d)",
		mergePrefix(mergeID), loser.NodeID, a.Self, v.Reason, loser.ClusterEpoch, loser.OverrideIndex)
	if a.OnSplit != nil {
		a.OnSplit(ctx, self, loser, v)
	}
	if err := a.audit(ctx, mergeID, KindBegin, detail); err != nil {
		return self, false, fmt.Errorf("heal begin: %w", err)
	}
	a.Log.Warn().Str("merge", mergeID).Str("loser", loser.NodeID).Str("reason", v.Reason).Msg("heal: merge begun; absorbing the loser's work")
	return self, false, nil
}

// Missing returns the ids this side neither holds nor remembers finished.
func (a *Absorber) Missing(ctx context.Context, mergeID string, ids []string) ([]string, error) {
	if err := a.requireBegun(mergeID); err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		st, err := a.State.SFLookup(id)
		if err != nil {
			return nil, fmt.Errorf("heal missing: look up %q: %w", id, err)
		}
		if st == fsm.StateUnknown {
			out = append(out, id)
		}
	}
	return out, ctx.Err()
}

// maxCommandBytes bounds the payload bytes of one absorbed enqueue command.
const maxCommandBytes = 4 << 20

// Messages enqueues the loser's messages here, ids preserved; messages
// held or finished here are duplicates and change nothing.
func (a *Absorber) Messages(ctx context.Context, mergeID string, msgs []Message) (Counts, error) {
	var c Counts
	if err := a.requireBegun(mergeID); err != nil {
		return c, err
	}
	for len(msgs) > 0 {
		n, size := 0, 0
		for n < len(msgs) && n < fsm.MaxEnqueueBatch && (n == 0 || size+len(msgs[n].Payload) <= maxCommandBytes) {
			size += len(msgs[n].Payload)
			n++
		}
		batch := msgs[:n]
		msgs = msgs[n:]
		res, err := a.propose(ctx, "heal:"+mergeID, func(cmd *fsmpb.Command) {
			enq := &fsmpb.SFEnqueue{}
			for _, m := range batch {
				pm := &fsmpb.Message{Id: m.ID, Target: m.Target, Payload: m.Payload}
				for _, h := range m.Headers {
					pm.Headers = append(pm.Headers, &fsmpb.KV{Key: h.Key, Value: h.Value})
				}
				enq.Messages = append(enq.Messages, pm)
			}
			cmd.Body = &fsmpb.Command_SfEnqueue{SfEnqueue: enq}
		})
		if err != nil {
			return c, fmt.Errorf("heal messages: enqueue %d: %w", len(batch), err)
		}
		c.Added += res.Enqueue.Added
		c.Duplicates += res.Enqueue.Duplicates
	}
	return c, nil
}

// Finished marks ids the loser delivered or discarded as finished here:
// pending ones are dropped, unknown ones remembered.
func (a *Absorber) Finished(ctx context.Context, mergeID string, ids []string) (Counts, error) {
	var c Counts
	if err := a.requireBegun(mergeID); err != nil {
		return c, err
	}
	var todo []string
	for _, id := range ids {
		st, err := a.State.SFLookup(id)
		if err != nil {
			return c, fmt.Errorf("heal finished: look up %q: %w", id, err)
		}
		if st == fsm.StateFinished {
			c.Duplicates++
			continue
		}
		todo = append(todo, id)
	}
	for len(todo) > 0 {
		n := min(len(todo), fsm.MaxBulk)
		batch := todo[:n]
		todo = todo[n:]
		res, err := a.propose(ctx, "heal:"+mergeID, func(cmd *fsmpb.Command) {
			cmd.Body = &fsmpb.Command_SfDelivered{SfDelivered: &fsmpb.SFDelivered{Ids: batch}}
		})
		if err != nil {
			return c, fmt.Errorf("heal finished: %d ids: %w", len(batch), err)
		}
		c.Added += res.Delivered.Removed + res.Delivered.Unknown
		c.Duplicates += res.Delivered.AlreadyDelivered
	}
	return c, nil
}

// recordPrefix keys one record within a merge.
func recordPrefix(mergeID, key string) string {
	return mergePrefix(mergeID) + "record " + key + ": "
}

// Records writes the loser's split-era deploys (superseded, never applied)
// and audit entries into this side's audit trail, each once.
func (a *Absorber) Records(ctx context.Context, mergeID, loser string, recs []Record) (Counts, error) {
	var c Counts
	details, begun, err := a.mergeEntries(mergeID)
	if err != nil {
		return c, err
	}
	if !begun {
		return c, fmt.Errorf("%w %q", ErrUnknownMerge, mergeID)
	}
	for _, r := range recs {
		prefix := recordPrefix(mergeID, r.Key)
		if slices.ContainsFunc(details, func(d string) bool { return strings.HasPrefix(d, prefix) }) {
			c.Duplicates++
			continue
		}
		kind := KindPeerAudit
		detail := fmt.Sprintf("%s%s's audit at %s by %s: %s", prefix, loser, r.At.UTC().Format(time.RFC3339Nano), r.Actor, r.Detail)
		if r.Kind == "deploy" {
			kind = KindDeploySuperseded
			detail = fmt.Sprintf("%s%s deployed during the split, at %s by %s: %s; superseded by this cluster's deployment, NOT applied",
				prefix, loser, r.At.UTC().Format(time.RFC3339Nano), r.Actor, r.Detail)
		}
		if err := a.audit(ctx, mergeID, kind, detail); err != nil {
			return c, fmt.Errorf("heal records: %w", err)
		}
		c.Added++
	}
	return c, nil
}

// FinishSummary is what the loser reports when it has handed everything
// over.
type FinishSummary struct {
	LoserEpoch                  uint64
	Messages, Finished, Records int64
}

// Finish raises the cluster epoch above both sides' and records the merge,
// once. It returns the cluster epoch after the merge.
func (a *Absorber) Finish(ctx context.Context, mergeID, loser string, s FinishSummary) (uint64, error) {
	details, begun, err := a.mergeEntries(mergeID)
	if err != nil {
		return 0, err
	}
	if !begun {
		return 0, fmt.Errorf("%w %q", ErrUnknownMerge, mergeID)
	}
	donePrefix := mergePrefix(mergeID) + "merged"
	if slices.ContainsFunc(details, func(d string) bool { return strings.HasPrefix(d, donePrefix) }) {
		return a.State.Meta().ClusterEpoch, nil
	}
	// A repeat after a lost answer must not bump twice: the epoch record
	// names the merge.
	bumped := false
	tag := "(merge " + mergeID + ")"
	err = a.State.AuditNewestFirst(func(e fsm.AuditEntry) bool {
		bumped = e.Kind == "override" && strings.Contains(e.Detail, tag)
		return !bumped && !(e.Kind == KindBegin && strings.HasPrefix(e.Detail, mergePrefix(mergeID)))
	})
	if err != nil {
		return 0, err
	}
	if !bumped {
		next := max(a.State.Meta().ClusterEpoch, s.LoserEpoch) + 1
		_, err = a.propose(ctx, a.Self, func(cmd *fsmpb.Command) {
			cmd.Body = &fsmpb.Command_SetClusterEpoch{SetClusterEpoch: &fsmpb.SetClusterEpoch{
				Epoch: next, NodeId: a.Self, Reason: fmt.Sprintf("heal: merged %s into this cluster %s", loser, tag),
			}}
		})
		var cerr *fsm.CommandError
		if err != nil && !(errors.As(err, &cerr) && cerr.Code == fsm.CodeEpochNotIncreasing) {
			return 0, fmt.Errorf("heal finish: raise the cluster epoch to %d: %w", next, err)
		}
	}
	detail := fmt.Sprintf("%smerged node %s: %d message(s) handed over, %d finished id(s), %d record(s); cluster epoch now %d",
		mergePrefix(mergeID), loser, s.Messages, s.Finished, s.Records, a.State.Meta().ClusterEpoch)
	if err := a.audit(ctx, mergeID, KindMerged, detail); err != nil {
		return 0, fmt.Errorf("heal finish: %w", err)
	}
	a.Log.Warn().Str("merge", mergeID).Str("loser", loser).Int64("messages", s.Messages).Int64("finished", s.Finished).
		Uint64("cluster_epoch", a.State.Meta().ClusterEpoch).Msg("heal: merge recorded; the loser now rejoins as Standby")
	return a.State.Meta().ClusterEpoch, nil
}
