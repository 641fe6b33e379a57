package sim

import (
	"context"
	"testing"
	"time"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway"
	pb "github.com/scadad/scadad/gateway/gatewaypb"
	"github.com/scadad/scadad/internal/testwait"
)

// A value the simulator has moved to is the tag's current value: a read,
// and the first value a new subscriber (the new Active after a failover)
// gets, carry it, not 0.
func TestMovingValueIsTheCurrentValue(t *testing.T) {
	_, c := start(t, Config{ChangeInterval: 20 * time.Millisecond})
	sess := open(t, c).GetSessionId()
	if _, err := c.Invoke(context.Background(), &pb.MxCommandRequest{SessionId: sess, Command: &pb.MxCommand{
		Kind: &pb.MxCommand_SubscribeBulk{SubscribeBulk: &pb.SubscribeBulkCommand{TagAddresses: []string{"Pump1.Speed"}, Supervisory: true}}}}); err != nil {
		t.Fatal(err)
	}
	read := func() field.Value {
		rep, err := c.Invoke(context.Background(), &pb.MxCommandRequest{SessionId: sess, Command: &pb.MxCommand{
			Kind: &pb.MxCommand_Read{Read: &pb.ReadCommand{TagAddress: "Pump1.Speed"}}}})
		if err != nil {
			t.Fatal(err)
		}
		return gateway.ValueFromProto(rep.GetRead().GetValue())
	}
	testwait.For(t, 5*time.Second, "a read to carry the moving value", func() bool {
		v, ok := read().(float64)
		return ok && v != 0
	})
}
