package control

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/fsm/fsmpb"
	"github.com/scadad/scadad/role"
)

type appliedLocally struct{ calls int }

func (a *appliedLocally) Apply(context.Context, []byte) (interface{}, error) {
	a.calls++
	return &fsm.Result{Index: 7}, nil
}

func auditCommand() *fsmpb.Command {
	return &fsmpb.Command{Version: fsm.CommandVersion, Actor: "t", Body: &fsmpb.Command_Audit{Audit: &fsmpb.Audit{Kind: "k", Detail: "d"}}}
}

// With no leader known, a proposal answers Unavailable once noLeaderWait
// has passed, not at its caller's (much later) deadline; a leader that
// appears within the wait is used.
func TestProposeWithoutALeaderFailsFast(t *testing.T) {
	roles := role.NewBroadcaster(role.State{Role: role.Standby})
	f := NewForwarder("a", map[string]string{"b": "127.0.0.1:1"}, nil, roles, &appliedLocally{}, 200*time.Millisecond)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.Propose(ctx, auditCommand())
	took := time.Since(start)
	if status.Code(err) != codes.Unavailable || !errors.Is(err, errNoLeader) || !strings.Contains(err.Error(), "no leader known") {
		t.Fatalf("Propose without a leader: %v, want Unavailable naming the missing leader", err)
	}
	if took < 200*time.Millisecond || took > 3*time.Second {
		t.Fatalf("Propose without a leader answered after %v, want about the 200 ms wait (the caller gave 10 s)", took)
	}

	local := &appliedLocally{}
	f = NewForwarder("a", nil, nil, roles, local, 2*time.Second)
	defer f.Close()
	go func() {
		time.Sleep(50 * time.Millisecond)
		roles.Publish(role.State{Role: role.Active})
	}()
	res, err := f.Propose(ctx, auditCommand())
	if err != nil || res.Index != 7 || local.calls != 1 {
		t.Fatalf("a leader elected within the wait: %+v, %v (%d local applies)", res, err, local.calls)
	}
}

// Without a noLeaderWait the caller's deadline is the bound.
func TestProposeWithoutALeaderWaitsForTheCallerWhenUnbounded(t *testing.T) {
	roles := role.NewBroadcaster(role.State{Role: role.Standby})
	f := NewForwarder("a", nil, nil, roles, &appliedLocally{}, 0)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.Propose(ctx, auditCommand())
	if status.Code(err) != codes.Unavailable || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("Propose: %v after %v, want Unavailable at the caller's 300 ms", err, time.Since(start))
	}
}
