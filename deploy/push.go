package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/siteconfig"
)

// ChunkSize bounds one artifact chunk, and so one Raft entry.
const ChunkSize = 256 << 10

// DefaultTarget is the deployment target of the site configuration.
const DefaultTarget = "site"

// Proposer commits a command through Raft and returns the FSM's verdict.
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsm.Result, error)
}

// State is the FSM read side the deploy code needs.
type State interface {
	Deployment(target string) (fsm.Deployment, error)
	Artifact(sha string) ([]byte, error)
}

// Pusher stores artifacts and moves the pointer.
type Pusher struct {
	Proposer Proposer
	State    State
	// Now stamps commands; it is the leader's clock, the only one the FSM sees.
	Now func() time.Time
	// Check, when set, refuses a site config that is valid on its own
	// but wrong for this cluster (the daemon's checks against its node
	// configuration). Its error is reported as invalid input.
	Check func(*siteconfig.Site) error
}

// PushRequest is one deploy push.
type PushRequest struct {
	Target   string
	Artifact []byte
	// Expect, when set, is the revision the pointer must be at.
	Expect  *uint64
	Message string
	Actor   string
}

// PushResult says what a push did.
type PushResult struct {
	Revision uint64
	SHA256   string
	// NoChange is true when the artifact was already current.
	NoChange bool
}

// InvalidError wraps a validation failure of the artifact itself.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// Push validates, stores and deploys req.Artifact.
func (p *Pusher) Push(ctx context.Context, req PushRequest) (PushResult, error) {
	if req.Target == "" {
		req.Target = DefaultTarget
	}
	site, err := siteconfig.Parse(req.Artifact)
	if err != nil {
		return PushResult{}, &InvalidError{Err: err}
	}
	// A config deployed before the upgrade still runs; a new push must
	// not rely on what this release no longer reads.
	if retired := site.Retired(); len(retired) > 0 {
		return PushResult{}, &InvalidError{Err: fmt.Errorf("site config names what this release no longer reads: %s", strings.Join(retired, "; "))}
	}
	if p.Check != nil {
		if err := p.Check(site); err != nil {
			return PushResult{}, &InvalidError{Err: err}
		}
	}
	sha := sha256hex(req.Artifact)
	current, err := p.current(req.Target)
	if err != nil {
		return PushResult{}, err
	}
	if current.SHA256 == sha && (req.Expect == nil || *req.Expect == current.Revision) {
		return PushResult{Revision: current.Revision, SHA256: sha, NoChange: true}, nil
	}
	if err := p.store(ctx, sha, req.Artifact, req.Actor); err != nil {
		return PushResult{}, err
	}
	expect := current.Revision
	if req.Expect != nil {
		expect = *req.Expect
	}
	return p.move(ctx, &fsmpb.Deploy{Target: req.Target, ExpectRevision: expect, Sha256: sha, Message: req.Message}, req.Actor)
}

// Rollback points the target back at the artifact of revision to (the one
// before the current when to is 0), as a new revision.
func (p *Pusher) Rollback(ctx context.Context, target string, to uint64, actor string) (PushResult, error) {
	if target == "" {
		target = DefaultTarget
	}
	d, err := p.current(target)
	if err != nil {
		return PushResult{}, fmt.Errorf("rollback %s: %w", target, err)
	}
	if d.Revision == 0 {
		return PushResult{}, fmt.Errorf("rollback %s: nothing has been deployed yet: %w", target, fsm.ErrNotFound)
	}
	if to == 0 {
		if d.Revision < 2 {
			return PushResult{}, fmt.Errorf("rollback %s: revision %d has no predecessor: %w", target, d.Revision, fsm.ErrNotFound)
		}
		to = d.Revision - 1
	}
	var sha string
	for _, r := range d.History {
		if r.Revision == to {
			sha = r.SHA256
		}
	}
	if sha == "" {
		return PushResult{}, fmt.Errorf("rollback %s to revision %d: no such revision: %w", target, to, fsm.ErrNotFound)
	}
	return p.move(ctx, &fsmpb.Deploy{Target: target, ExpectRevision: d.Revision, Sha256: sha, Message: fmt.Sprintf("rollback to revision %d", to), RollbackOf: to}, actor)
}

func (p *Pusher) current(target string) (fsm.Deployment, error) {
	d, err := p.State.Deployment(target)
	if errors.Is(err, fsm.ErrNotFound) {
		return fsm.Deployment{Target: target}, nil
	}
	if err != nil {
		return fsm.Deployment{}, fmt.Errorf("read deployment %s: %w", target, err)
	}
	return d, nil
}

// store uploads the artifact's chunks and commits it, unless the FSM holds
// it already.
func (p *Pusher) store(ctx context.Context, sha string, artifact []byte, actor string) error {
	if _, err := p.State.Artifact(sha); err == nil {
		return nil
	}
	total := uint32((len(artifact) + ChunkSize - 1) / ChunkSize)
	for i := uint32(0); i < total; i++ {
		end := min(int(i+1)*ChunkSize, len(artifact))
		chunk := &fsmpb.PutArtifactChunk{Sha256: sha, Index: i, Total: total, Data: artifact[int(i)*ChunkSize : end]}
		res, err := p.propose(ctx, actor, &fsmpb.Command{Body: &fsmpb.Command_PutArtifactChunk{PutArtifactChunk: chunk}})
		if err != nil {
			return fmt.Errorf("store artifact %.12s chunk %d/%d: %w", sha, i+1, total, err)
		}
		if errors.Is(res.Err, fsm.ErrArtifactCommitted) {
			return nil
		}
		if res.Err != nil {
			return fmt.Errorf("store artifact %.12s chunk %d/%d: %w", sha, i+1, total, res.Err)
		}
	}
	commit := &fsmpb.CommitArtifact{Sha256: sha, Size: uint64(len(artifact)), TotalChunks: total}
	res, err := p.propose(ctx, actor, &fsmpb.Command{Body: &fsmpb.Command_CommitArtifact{CommitArtifact: commit}})
	if err != nil {
		return fmt.Errorf("commit artifact %.12s: %w", sha, err)
	}
	if res.Err != nil && !errors.Is(res.Err, fsm.ErrArtifactCommitted) {
		return fmt.Errorf("commit artifact %.12s: %w", sha, res.Err)
	}
	return nil
}

func (p *Pusher) move(ctx context.Context, d *fsmpb.Deploy, actor string) (PushResult, error) {
	res, err := p.propose(ctx, actor, &fsmpb.Command{Body: &fsmpb.Command_Deploy{Deploy: d}})
	if err != nil {
		return PushResult{}, fmt.Errorf("deploy %.12s to %s: %w", d.Sha256, d.Target, err)
	}
	if res.Err != nil {
		return PushResult{}, fmt.Errorf("deploy %.12s to %s (expected revision %d): %w", d.Sha256, d.Target, d.ExpectRevision, res.Err)
	}
	return PushResult{Revision: res.Deploy.Revision, SHA256: res.Deploy.SHA256, NoChange: res.Deploy.NoChange}, nil
}

func (p *Pusher) propose(ctx context.Context, actor string, cmd *fsmpb.Command) (*fsm.Result, error) {
	cmd.Version = fsm.CommandVersion
	cmd.Actor = actor
	cmd.StampUnixNano = p.Now().UnixNano()
	return p.Proposer.Propose(ctx, cmd)
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
