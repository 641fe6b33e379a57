package heal

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/fsm"
)

// errRefused marks a winner that refuses the merge outright (its rule
// disagrees, or it is no longer Active): retrying cannot help.
var errRefused = errors.New("the winner refuses the merge")

// Page sizes of the hand-over. A message page is looked up by id first;
// only the missing messages travel, in batches of at most batchBytes.
const (
	pageSize   = 1000
	batchBytes = 2 << 20
	recordPage = 500
)

// handOver sends the winner everything it lacks, from the fenced (frozen)
// FSM. It is idempotent and is simply repeated after any failure.
func (m *Manager) handOver(ctx context.Context, mk Marker, progress func(string)) error {
	cli, err := m.cfg.Dial(ctx, mk.Winner)
	if err != nil {
		return fmt.Errorf("dial winner %s: %w", mk.Winner, err)
	}
	call := func(what string, fn func(ctx context.Context) error) error {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
		defer cancel()
		err := fn(rctx)
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.FailedPrecondition, codes.PermissionDenied, codes.NotFound:
			return fmt.Errorf("%s: %w: %v", what, errRefused, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	self, err := m.Facts(ctx)
	if err != nil {
		return err
	}
	self.ClusterEpoch, self.OverrideIndex = mk.LoserEpoch, mk.OverrideIndex
	if err := call("begin", func(ctx context.Context) error {
		_, err := cli.HealBegin(ctx, &controlpb.HealBeginRequest{MergeId: mk.MergeID, Loser: factsToProto(self)})
		return err
	}); err != nil {
		return err
	}

	var sum FinishSummary
	sum.LoserEpoch = mk.LoserEpoch
	targets, err := m.cfg.State.SFTargets()
	if err != nil {
		return err
	}
	for _, target := range targets {
		for _, parked := range []bool{false, true} {
			var after uint64
			for {
				var page []fsm.Message
				if parked {
					page, err = m.cfg.State.SFParkedAfter(target, after, pageSize)
				} else {
					page, err = m.cfg.State.SFPending(target, after, pageSize)
				}
				if err != nil {
					return fmt.Errorf("read messages of %s: %w", target, err)
				}
				if len(page) == 0 {
					break
				}
				after = page[len(page)-1].Seq
				n, err := m.sendMessages(ctx, cli, call, mk.MergeID, page, parked)
				if err != nil {
					return err
				}
				sum.Messages += int64(n)
				progress(fmt.Sprintf("messages: %d handed over (target %s)", sum.Messages, target))
			}
		}
	}

	var after uint64
	for {
		page, err := m.cfg.State.SFFinishedAfter(after, fsm.MaxBulk)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].Seq
		ids := make([]string, len(page))
		for i, f := range page {
			ids[i] = f.ID
		}
		var resp *controlpb.HealCounts
		if err := call("finished ids", func(ctx context.Context) error {
			resp, err = cli.HealFinished(ctx, &controlpb.HealFinishedRequest{MergeId: mk.MergeID, Ids: ids})
			return err
		}); err != nil {
			return err
		}
		sum.Finished += resp.Added
		m.cfg.Metrics.finishedHandedOver.Add(float64(resp.Added))
		progress(fmt.Sprintf("finished ids: %d new to the winner", sum.Finished))
	}

	recs, err := m.splitRecords(mk.OverrideIndex)
	if err != nil {
		return err
	}
	for len(recs) > 0 {
		n := min(len(recs), recordPage)
		req := &controlpb.HealRecordsRequest{MergeId: mk.MergeID}
		for _, r := range recs[:n] {
			req.Records = append(req.Records, &controlpb.HealRecord{Kind: r.Kind, Key: r.Key, AtUnixNano: r.At.UnixNano(), Actor: r.Actor, Detail: r.Detail})
		}
		recs = recs[n:]
		var resp *controlpb.HealCounts
		if err := call("records", func(ctx context.Context) error {
			resp, err = cli.HealRecords(ctx, req)
			return err
		}); err != nil {
			return err
		}
		sum.Records += resp.Added
	}

	return call("finish", func(ctx context.Context) error {
		resp, err := cli.HealFinish(ctx, &controlpb.HealFinishRequest{MergeId: mk.MergeID, LoserEpoch: sum.LoserEpoch,
			Messages: sum.Messages, Finished: sum.Finished, Records: sum.Records})
		if err == nil {
			m.log.Warn().Str("merge", mk.MergeID).Int64("messages", sum.Messages).Int64("finished", sum.Finished).
				Int64("records", sum.Records).Uint64("cluster_epoch", resp.ClusterEpoch).Msg("heal: the winner holds everything")
		}
		return err
	})
}

// sendMessages hands one page over: the ids first, then the payloads of
// the missing ones in bounded batches. It returns how many the winner added.
func (m *Manager) sendMessages(ctx context.Context, cli controlpb.HealClient, call func(string, func(context.Context) error) error,
	mergeID string, page []fsm.Message, parked bool) (int, error) {
	ids := make([]string, len(page))
	for i, msg := range page {
		ids[i] = msg.ID
	}
	var missing *controlpb.HealMissingResponse
	err := call("missing ids", func(ctx context.Context) error {
		var err error
		missing, err = cli.HealMissing(ctx, &controlpb.HealMissingRequest{MergeId: mergeID, Ids: ids})
		return err
	})
	if err != nil {
		return 0, err
	}
	want := make(map[string]bool, len(missing.Missing))
	for _, id := range missing.Missing {
		want[id] = true
	}
	added := 0
	var batch []*controlpb.HealMessage
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var resp *controlpb.HealCounts
		err := call("messages", func(ctx context.Context) error {
			var err error
			resp, err = cli.HealMessages(ctx, &controlpb.HealMessagesRequest{MergeId: mergeID, Messages: batch})
			return err
		})
		if err != nil {
			return err
		}
		added += int(resp.Added)
		m.cfg.Metrics.messagesHandedOver.Add(float64(resp.Added))
		batch, size = nil, 0
		return nil
	}
	for _, msg := range page {
		if !want[msg.ID] {
			continue
		}
		if size+len(msg.Payload) > batchBytes {
			if err := flush(); err != nil {
				return added, err
			}
		}
		hm := &controlpb.HealMessage{Id: msg.ID, Target: msg.Target, Payload: msg.Payload, Parked: parked}
		for _, h := range msg.Headers {
			hm.Headers = append(hm.Headers, &controlpb.HealHeader{Key: h.Key, Value: h.Value})
		}
		batch = append(batch, hm)
		size += len(msg.Payload)
	}
	return added, flush()
}

// splitRecords collects the loser's deploys and audit entries committed at
// or after its override record (its split began there).
func (m *Manager) splitRecords(fromIndex uint64) ([]Record, error) {
	var out []Record
	if fromIndex == 0 {
		return nil, nil
	}
	targets, err := m.cfg.State.DeployTargets()
	if err != nil {
		return nil, err
	}
	for _, t := range targets {
		d, err := m.cfg.State.Deployment(t)
		if err != nil {
			return nil, err
		}
		for _, r := range d.History {
			if r.LogIndex < fromIndex {
				continue
			}
			detail := fmt.Sprintf("target %s revision %d sha256 %s (%q)", t, r.Revision, r.SHA256, r.Message)
			if r.RollbackOf != 0 {
				detail += " rolling back to revision " + strconv.FormatUint(r.RollbackOf, 10)
			}
			out = append(out, Record{Kind: "deploy", Key: fmt.Sprintf("deploy/%s/%d", t, r.Revision), At: r.At, Actor: r.Actor, Detail: detail})
		}
	}
	var after uint64
	for {
		page, err := m.cfg.State.Audit(after, fsm.DefaultListLimit)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].Seq
		for _, e := range page {
			if e.LogIndex < fromIndex {
				continue
			}
			out = append(out, Record{Kind: "audit", Key: fmt.Sprintf("audit/%d", e.Seq), At: e.At, Actor: e.Actor,
				Detail: "[" + e.Kind + "] " + e.Detail})
		}
	}
	return out, nil
}

func factsToProto(f Facts) *controlpb.HealFacts {
	return &controlpb.HealFacts{NodeId: f.NodeID, Active: f.Active, Voters: f.Voters, ClusterEpoch: f.ClusterEpoch,
		OverrideUnixNano: f.OverrideUnixNano, OverrideIndex: f.OverrideIndex, Preferred: f.Preferred, Phase: f.Phase, MergeId: f.MergeID}
}

func factsFromProto(p *controlpb.HealFacts) Facts {
	return Facts{NodeID: p.NodeId, Active: p.Active, Voters: p.Voters, ClusterEpoch: p.ClusterEpoch,
		OverrideUnixNano: p.OverrideUnixNano, OverrideIndex: p.OverrideIndex, Preferred: p.Preferred, Phase: p.Phase, MergeID: p.MergeId}
}

// FactsToProto and FactsFromProto convert for the Heal service.
func FactsToProto(f Facts) *controlpb.HealFacts { return factsToProto(f) }

// FactsFromProto converts a peer's facts.
func FactsFromProto(p *controlpb.HealFacts) Facts { return factsFromProto(p) }
