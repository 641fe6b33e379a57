package sim

import (
	"context"
	"testing"
	"time"

	"github.com/scadad/scadad/field"
	"github.com/scadad/scadad/gateway"
	pb "github.com/scadad/scadad/gateway/gatewaypb"
	"github.com/scadad/scadad/siteconfig"
)

// Every tag gets values of its configured kind, from the value sent on
// subscribe on: a Boolean attribute fed Doubles reads BadTypeMismatch for
// ever.
func TestValuesHaveTheTagsKind(t *testing.T) {
	site, err := siteconfig.Parse([]byte(`version: 1
name: kinds
connections:
  - {name: gw, kind: mxaccess, mxaccess: {endpoint: "127.0.0.1:1"}}
instances:
  - name: P
    connection: gw
    attributes:
      - {name: B, type: bool, tag: P.B}
      - {name: I, type: int32, tag: P.I}
      - {name: L, type: int64, tag: P.L}
      - {name: F, type: float, tag: P.F}
      - {name: D, type: double, tag: P.D}
      - {name: S, type: string, tag: P.S}
opcua:
  namespace_uri: urn:kinds
  security: [{policy: None, mode: None}]
  identities: {anonymous: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"P.B": "bool", "P.I": "int", "P.L": "int", "P.F": "double", "P.D": "double", "P.S": "string", "P.Unlisted": "double"}
	_, c := start(t, Config{ChangeInterval: 10 * time.Millisecond, Kinds: KindsOf(site)})
	sess := open(t, c).GetSessionId()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := c.StreamEvents(ctx, &pb.StreamEventsRequest{SessionId: sess})
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for tag := range want {
		tags = append(tags, tag)
	}
	if _, err := c.Invoke(ctx, &pb.MxCommandRequest{SessionId: sess, Command: &pb.MxCommand{
		Kind: &pb.MxCommand_SubscribeBulk{SubscribeBulk: &pb.SubscribeBulkCommand{TagAddresses: tags, Supervisory: true}}}}); err != nil {
		t.Fatal(err)
	}
	// Three values of each tag: the one sent on subscribe and two changes.
	seen := map[string][]field.Value{}
	for len(seen) < len(want) || !atLeast(seen, 3) {
		ev, err := events.Recv()
		if err != nil {
			t.Fatalf("events: %v (seen %v)", err, seen)
		}
		dc := ev.GetDataChange()
		if dc == nil {
			continue
		}
		v := gateway.ValueFromProto(dc.GetValue())
		if got := kindOf(v); got != want[dc.GetTagAddress()] {
			t.Fatalf("%s: value %v is a %s, want a %s", dc.GetTagAddress(), v, got, want[dc.GetTagAddress()])
		}
		seen[dc.GetTagAddress()] = append(seen[dc.GetTagAddress()], v)
	}
	if b := seen["P.B"]; b[1] == b[2] {
		t.Errorf("the Boolean did not move: %v", b)
	}
	if s := seen["P.S"]; s[1] == s[2] {
		t.Errorf("the String did not move: %v", s)
	}
}

func atLeast(seen map[string][]field.Value, n int) bool {
	for _, vs := range seen {
		if len(vs) < n {
			return false
		}
	}
	return true
}

func kindOf(v field.Value) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "double"
	case string:
		return "string"
	}
	return "nil"
}
