package mqtttarget

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/storeforward"
)

func TestReasonCodesThatPark(t *testing.T) {
	for code, permanent := range map[byte]bool{0x87: true, 0x90: true, 0x95: true, 0x99: true, 0x80: false, 0x83: false, 0x97: false} {
		v := (&Refusal{Code: code}).Verdict()
		if v.Permanent != permanent || v.Code == "" {
			t.Errorf("reason code 0x%02x: %+v, want permanent %v", code, v, permanent)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Settings{Broker: "mqtt://127.0.0.1:1883", Topic: "plant/{target}"}
	if err := (Kind{}).Validate(storeforward.Target{Name: "m", Settings: ok}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Settings{
		{Broker: "http://h:1", Topic: "t"}, {Broker: "mqtt://h", Topic: "t"}, {Broker: "mqtt://h:1", Topic: "a/#"},
		{Broker: "mqtt://h:1", Topic: "t", CertFile: "c"},
	} {
		if err := (Kind{}).Validate(storeforward.Target{Name: "m", Settings: bad}); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if id := ClientID("node-a", "hist"); id != "scadad-node-a-hist" {
		t.Errorf("client id %q", id)
	}
}

// Each delivery slot's connection has a client id of its own, with the
// node in it, and the slot is kept when a long target name is cut.
func TestSlotClientID(t *testing.T) {
	long := strings.Repeat("t", 200)
	for _, tc := range []struct {
		target string
		slot   int
		want   string
	}{
		{"hist", 0, "scadad-node-a-hist"},
		{"hist", 1, "scadad-node-a-hist-1"},
		{"hist", 12, "scadad-node-a-hist-12"},
		{long, 0, ("scadad-node-a-" + long)[:128]},
		{long, 3, ("scadad-node-a-" + long)[:126] + "-3"},
	} {
		if got := SlotClientID("node-a", tc.target, tc.slot); got != tc.want {
			t.Errorf("target %.10s… slot %d: %q, want %q", tc.target, tc.slot, got, tc.want)
		}
	}
}

func TestTopicTemplate(t *testing.T) {
	for _, tc := range []struct{ template, id, want string }{
		{"plant/{target}/{node}", "m-1", "plant/hist/node-a"},
		{"plant/{target}/{id}", "m-1", "plant/hist/m-1"},
		{"{id}/{id}", "a{node}", "a{node}/a{node}"}, // an id's text is not replaced again
	} {
		if got := newTopicTemplate(tc.template, "hist", "node-a").of(tc.id); got != tc.want {
			t.Errorf("%s with id %s: %q, want %q", tc.template, tc.id, got, tc.want)
		}
	}
}

// An empty batch is delivered at once, without a connection (none is
// made to a broker that is not there).
func TestEmptyBatch(t *testing.T) {
	target := storeforward.Target{Name: "hist", Timeout: time.Second, MaxInFlight: 2, Settings: Settings{Broker: "mqtt://127.0.0.1:1", Topic: "t"}}
	snd, err := Kind{}.NewSender(target, storeforward.SenderEnv{NodeID: "node-a", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // even with the caller gone
	if err := snd.Send(ctx, nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}
