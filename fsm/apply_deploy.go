package fsm

import (
	"fmt"

	"github.com/scadad/scadad/fsm/fsmpb"
)

func (a *applier) deployArtifact(c *fsmpb.Deploy, res *Result) error {
	if e := firstErr(checkID("target", c.Target), checkSHA(c.Sha256), checkText("message", c.Message, MaxTextBytes)); e != nil {
		res.Err = e
		return nil
	}
	tb := a.deploy.Bucket([]byte(c.Target))
	var ptr fsmpb.DeployPointer
	if tb != nil {
		if _, err := getRecord(tb, deployPtr, &ptr); err != nil {
			return err
		}
	}
	// Already current wins over the revision check: a client retrying a
	// deploy whose reply it lost must hear "done", not "mismatch".
	if tb != nil && ptr.Sha256 == c.Sha256 {
		res.Deploy = &DeployOutcome{Target: c.Target, Revision: ptr.Revision, SHA256: ptr.Sha256, NoChange: true}
		return nil
	}
	if ptr.Revision != c.ExpectRevision {
		res.Err = cmdErr(CodeRevisionMismatch, "target %q is at revision %d, deploy expected %d", c.Target, ptr.Revision, c.ExpectRevision)
		return nil
	}
	committed, err := a.artifactCommitted(c.Sha256)
	if err != nil {
		return err
	}
	if !committed {
		res.Err = cmdErr(CodeArtifactNotCommitted, "artifact %s is not committed", c.Sha256)
		return nil
	}
	if c.RollbackOf != 0 {
		var prev fsmpb.DeployRecord
		ok := false
		if tb != nil {
			if hb := tb.Bucket(deployHistory); hb != nil {
				if ok, err = getRecord(hb, u64(c.RollbackOf), &prev); err != nil {
					return err
				}
			}
		}
		if !ok || prev.Sha256 != c.Sha256 {
			res.Err = cmdErr(CodeInvalid, "target %q: revision %d does not exist with artifact %s", c.Target, c.RollbackOf, c.Sha256)
			return nil
		}
	}

	if tb == nil {
		if tb, err = a.deploy.CreateBucket([]byte(c.Target)); err != nil {
			return err
		}
		if _, err := tb.CreateBucket(deployHistory); err != nil {
			return err
		}
		if _, err := tb.CreateBucket(deployAcks); err != nil {
			return err
		}
	}
	rev := ptr.Revision + 1
	rec := &fsmpb.DeployRecord{
		Revision:      rev,
		Sha256:        c.Sha256,
		Actor:         a.cmd.Actor,
		StampUnixNano: a.cmd.StampUnixNano,
		Message:       c.Message,
		RollbackOf:    c.RollbackOf,
		LogIndex:      a.index,
	}
	if err := a.putRecord(tb.Bucket(deployHistory), u64(rev), rec); err != nil {
		return err
	}
	if err := a.putRecord(tb, deployPtr, &fsmpb.DeployPointer{Revision: rev, Sha256: c.Sha256}); err != nil {
		return err
	}
	detail := fmt.Sprintf("target %s revision %d artifact %s", c.Target, rev, c.Sha256)
	if c.RollbackOf != 0 {
		detail += fmt.Sprintf(" (rollback to revision %d)", c.RollbackOf)
	}
	if c.Message != "" {
		detail += ": " + c.Message
	}
	if _, err := a.writeAudit("deploy", detail); err != nil {
		return err
	}
	res.Deploy = &DeployOutcome{Target: c.Target, Revision: rev, SHA256: c.Sha256}
	return nil
}

func (a *applier) deployAck(c *fsmpb.DeployAck, res *Result) error {
	if e := firstErr(checkID("target", c.Target), checkID("node id", c.NodeId), checkText("reason", c.Reason, MaxTextBytes)); e != nil {
		res.Err = e
		return nil
	}
	tb := a.deploy.Bucket([]byte(c.Target))
	if tb == nil {
		res.Err = cmdErr(CodeUnknown, "target %q was never deployed", c.Target)
		return nil
	}
	var ptr fsmpb.DeployPointer
	if _, err := getRecord(tb, deployPtr, &ptr); err != nil {
		return err
	}
	if c.Revision == 0 || c.Revision > ptr.Revision {
		res.Err = cmdErr(CodeInvalid, "target %q: ack for revision %d, current is %d", c.Target, c.Revision, ptr.Revision)
		return nil
	}
	acks := tb.Bucket(deployAcks)
	var prev fsmpb.DeployAckRecord
	ok, err := getRecord(acks, []byte(c.NodeId), &prev)
	if err != nil {
		return err
	}
	if ok && prev.Revision > c.Revision {
		res.Ack = &AckOutcome{Stale: true}
		return nil
	}
	rec := &fsmpb.DeployAckRecord{NodeId: c.NodeId, Revision: c.Revision, Ok: c.Ok, Reason: c.Reason, StampUnixNano: a.cmd.StampUnixNano}
	if err := a.putRecord(acks, []byte(c.NodeId), rec); err != nil {
		return err
	}
	res.Ack = &AckOutcome{}
	return nil
}
