//go:build linux

package integration

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
)

// 10,000 messages to an MQTT target (Mosquitto with a password file and
// persistence) across a SIGKILL of the Active and a restart of the broker
// mid-stream: a subscribing client with a persistent session receives
// every acknowledged id, duplicates only with the same id, and each
// producer's messages in the order they were acknowledged (max_in_flight
// 1).
func TestSFMQTTAtLeastOnceAcrossKillAndBrokerRestart(t *testing.T) {
	broker, err := testcluster.StartMosquitto(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Stop)
	rec, err := broker.Subscribe("test-recorder", "plant/#")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	c, active, targets := sfTargetCluster(t, "sf-mqtt", fmt.Sprintf(
		"{name: broker, kind: mqtt, mqtt: {broker: %q, topic: \"plant/{target}/{node}\", username: scadad, password_file: %q, session_expiry: 1h}, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms, max_payload_bytes: 65536, max_in_flight: 1, batch_max_messages: 200}",
		broker.URL, broker.PasswordFile))
	if len(targets) != 1 || targets[0].Kind != "mqtt" || !strings.Contains(targets[0].Endpoint, "topic plant/{target}/{node}") {
		t.Fatalf("sf targets: %+v", targets)
	}

	const producers, per = 10, 1000
	var acked atomic.Int64
	wait := produce(c, "broker", "mq", producers, per, &acked)
	testwait.For(t, 60*time.Second, "3,000 acknowledged", func() bool { return acked.Load() >= 3000 })
	c.Kill(active)
	t.Logf("SIGKILL of the Active at %d acknowledged", acked.Load())
	testwait.For(t, 60*time.Second, "6,000 acknowledged", func() bool { return acked.Load() >= 6000 })
	broker.Stop()
	t.Logf("broker stopped at %d acknowledged", acked.Load())
	time.Sleep(time.Second)
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	wait()

	var ids, topics []string
	testwait.ForDetail(t, 180*time.Second, "every id received", func() (bool, string) {
		ids, topics = rec.IDs()
		seen := map[string]bool{}
		for _, id := range ids {
			seen[id] = true
		}
		return len(seen) >= producers*per, fmt.Sprintf("%d distinct of %d received", len(seen), len(ids))
	})
	counts := map[string]int{}
	last := map[string]string{}
	for i, id := range ids {
		if !strings.HasPrefix(id, "mq-") {
			t.Fatalf("received %q", id)
		}
		if !strings.HasPrefix(topics[i], "plant/broker/node-") {
			t.Fatalf("topic %q", topics[i])
		}
		counts[id]++
		producer := id[:strings.LastIndex(id, "-")]
		// A redelivery after the failover goes back to an earlier id:
		// order is checked on first arrivals.
		if counts[id] == 1 {
			if prev, ok := last[producer]; ok && prev > id {
				t.Fatalf("%s first arrived after %s (FIFO broken)", id, prev)
			}
			last[producer] = id
		}
	}
	for w := 0; w < producers; w++ {
		for i := 0; i < per; i++ {
			if id := fmt.Sprintf("mq-%02d-%05d", w, i); counts[id] == 0 {
				t.Fatalf("%s acknowledged, never received", id)
			}
		}
	}
	t.Logf("%d received for %d distinct ids", len(ids), len(counts))
}
