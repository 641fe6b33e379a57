package integration

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testwait"
)

// TestOPCUANodeOPCUAEvents: node-opcua, as an alarm client of the
// Active, subscribes to the Server object's events with its own event
// filter, gets every retained condition from a ConditionRefresh between
// RefreshStart and RefreshEnd, and acknowledges an alarm with the EventId
// and ConditionId its event carried; the acknowledgement reaches the
// simulator and comes back as an event.
func TestOPCUANodeOPCUAEvents(t *testing.T) {
	node, dir := needNode(t)
	sim, c, active, _ := alarmPair(t)
	for i := 1; i <= 3; i++ {
		simAlarm(t, sim, "raise", url.Values{"id": {fmt.Sprintf("N%d", i)}, "source": {"Pump1"}, "severity": {"600"}, "condition": {"HiLevel"}, "message": {fmt.Sprintf("level high N%d", i)}})
	}
	testwait.For(t, 30*time.Second, "the three alarms in the replicated state", func() bool { return listAlarmsActive(t, c, active) == 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got struct {
		Fatal         string   `json:"fatal"`
		RefreshStatus string   `json:"refreshStatus"`
		Refreshed     []string `json:"refreshed"`
		ConditionID   string   `json:"conditionId"`
		AckStatus     string   `json:"ackStatus"`
		AckedEvent    bool     `json:"ackedEvent"`
	}
	runNode(t, ctx, node, dir, "events.js", map[string]string{"ENDPOINT": active.OPCUA, "PKI": t.TempDir(), "ACK": "N2"}, &got)
	t.Logf("node-opcua saw: %+v", got)
	want := "[HiLevel:level high N1:true HiLevel:level high N2:true HiLevel:level high N3:true Warm:warm-up:true]"
	if got.Fatal != "" || got.RefreshStatus != "Good" || fmt.Sprint(got.Refreshed) != want {
		t.Fatalf("node-opcua's ConditionRefresh: %+v, want %s", got, want)
	}
	if got.AckStatus != "Good" || !got.AckedEvent {
		t.Fatalf("node-opcua's Acknowledge of N2 (%s): %s, acknowledged event seen %v", got.ConditionID, got.AckStatus, got.AckedEvent)
	}
	acks := simAlarmAcks(t, sim).Alarms.Acks
	if len(acks) != 1 || acks[0].AlarmID != "N2" || acks[0].Epoch == "" {
		t.Fatalf("gateway acknowledgements %+v, want N2 with the Active's epoch", acks)
	}
}
