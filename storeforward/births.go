package storeforward

import (
	"context"
	"errors"
	"fmt"

	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/internal/clock"
)

// Births counts a target's Sparkplug B sessions in the replicated buffer
// (SFBirth, FSM feature level 4): a session's bdSeq is the count modulo
// 256, so it goes on from where the last Active node left it and a host
// application never takes the will (NDEATH) of an earlier session for the
// current one's. It is the sparkplug kind's BirthCounter.
type Births struct {
	Proposer Proposer
	Actor    string
	Clock    clock.Clock
}

// NextBirth commits a birth of target's Edge Node and returns its bdSeq.
// In a cluster with a member below feature level 4 the leader refuses it:
// the Sparkplug target then does not connect, and its messages wait.
func (b Births) NextBirth(ctx context.Context, target string) (uint8, error) {
	if b.Proposer == nil {
		return 0, errors.New("births: no proposer")
	}
	clk := b.Clock
	if clk == nil {
		clk = clock.System()
	}
	res, err := b.Proposer.Propose(ctx, &fsmpb.Command{
		StampUnixNano: clk.Now().UnixNano(), Actor: b.Actor,
		Body: &fsmpb.Command_SfBirth{SfBirth: &fsmpb.SFBirth{Target: target}},
	})
	if err == nil && res != nil && res.Err != nil {
		err = res.Err
	}
	if err == nil && (res == nil || res.Birth == nil) {
		err = errors.New("no birth outcome")
	}
	if err != nil {
		return 0, fmt.Errorf("record a Sparkplug session of target %s (bdSeq): %w", target, err)
	}
	return uint8((res.Birth.Births - 1) % 256), nil
}
