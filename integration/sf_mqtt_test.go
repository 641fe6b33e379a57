//go:build linux

package integration

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scadad/scadad/api/controlpb"
	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/storeforward/mqtttarget"
)

// 10,000 messages to an MQTT target (Mosquitto with a password file and
// persistence) across a SIGKILL of the Active and a restart of the broker
// mid-stream, with MQTT 5 and with 3.1.1: a subscribing client with a
// persistent session receives every acknowledged id, duplicates only with
// the same id (and that id's payload), and each producer's messages in
// the order they were acknowledged (max_in_flight 1). Once more with MQTT
// 5 and four deliveries under way (max_in_flight 4), order not kept: each
// has a connection of its own, a client id each in the broker's log.
//
// The recorder is an MQTT 5 client either way. With MQTT 5 the id is the
// message-id user property and the topic does not hold it, so a publish
// without the property fails the test; with 3.1.1 there are no
// properties and the id travels only in the topic ({id}), so the test
// reads it there and fails if a publish carries a property (it would not
// be 3.1.1). The broker's log says which protocol each of scadad's
// connections spoke (p5 or p2, Mosquitto's number for 3.1.1).
func TestSFMQTTAtLeastOnceAcrossKillAndBrokerRestart(t *testing.T) {
	for _, tc := range []struct {
		name, protocol, topic, logProtocol string
		// inFlight is max_in_flight: above 1, order is not kept, and
		// each delivery under way has a connection (a client id) of
		// its own.
		inFlight int
	}{
		{name: "5", topic: "plant/{target}/{node}", logProtocol: "p5", inFlight: 1},
		{name: "3.1.1", protocol: "3.1.1", topic: "plant/{target}/{node}/{id}", logProtocol: "p2", inFlight: 1},
		{name: "5 with 4 deliveries under way", topic: "plant/{target}/{node}", logProtocol: "p5", inFlight: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{}, "test-recorder", "plant/#")
			protocol := ""
			if tc.protocol != "" {
				protocol = fmt.Sprintf("protocol: %q, ", tc.protocol)
			}
			c, active, targets := sfTargetCluster(t, "sf-mqtt", fmt.Sprintf(
				"{name: broker, kind: mqtt, mqtt: {broker: %q, %stopic: %q, username: scadad, password_file: %q, session_expiry: 1h}, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms, max_payload_bytes: 65536, max_in_flight: %d, batch_max_messages: 200}",
				broker.URL, protocol, tc.topic, broker.PasswordFile, tc.inFlight))
			if len(targets) != 1 || targets[0].Kind != "mqtt" || !strings.Contains(targets[0].Endpoint, "topic "+tc.topic) {
				t.Fatalf("sf targets: %+v", targets)
			}
			testSFMQTTAcrossKillAndBrokerRestart(t, c, active, broker, rec, tc.protocol == "3.1.1", tc.inFlight == 1)
			log, err := broker.Log()
			if err != nil {
				t.Fatal(err)
			}
			connects := regexp.MustCompile(`as (scadad-\S+) \((p\d+),`).FindAllStringSubmatch(log, -1)
			if len(connects) < 2 {
				t.Fatalf("%d connections of scadad in the broker's log, want one before and one after the failover and the restart", len(connects))
			}
			clientIDs := map[string]bool{}
			for _, m := range connects {
				if m[2] != tc.logProtocol {
					t.Fatalf("a scadad connection spoke %s, want %s (MQTT %s)", m[2], tc.logProtocol, tc.name)
				}
				clientIDs[m[1]] = true
			}
			// Two nodes were Active in turn, each under its own client
			// ids; the survivor, which delivered the backlogs of the
			// failover and of the restart, with one for each delivery
			// under way. (The killed Active may have had fewer under way
			// in the second it delivered.)
			survivor := otherVoter(t, c, active)
			for _, n := range []*testcluster.Node{active, survivor} {
				want := 1
				if n == survivor {
					want = tc.inFlight
				}
				for slot := range want {
					if id := mqtttarget.SlotClientID(n.ID, "broker", slot); !clientIDs[id] {
						t.Fatalf("scadad connected as %v; want %s among them (%d deliveries under way on %s)", slices.Sorted(maps.Keys(clientIDs)), id, want, n.ID)
					}
				}
			}
		})
	}
}

// testSFMQTTAcrossKillAndBrokerRestart is TestSFMQTTAtLeastOnceAcrossKillAndBrokerRestart's
// run for one protocol: v311 reads the id from the topic's last level
// (and wants no user property), otherwise from the message-id property;
// inOrder checks each producer's first arrivals are in order.
func testSFMQTTAcrossKillAndBrokerRestart(t *testing.T, c *testcluster.Cluster, active *testcluster.Node, broker *testcluster.Mosquitto, rec *testcluster.MQTTRecorder, v311, inOrder bool) {
	const producers, per = 10, 1000
	var acked atomic.Int64
	wait := produce(c, "broker", "mq", producers, per, &acked)
	awaitConnection(t, broker, active, "broker")
	killAndRestartMidStream(t, c, active, broker, acked.Load)
	wait()

	var msgs []testcluster.MQTTMessage
	var ids []string
	testwait.ForDetail(t, 180*time.Second, "every id received", func() (bool, string) {
		ids, _ = rec.IDs()
		msgs = rec.Messages()[:len(ids)]
		seen := map[string]bool{}
		for i, m := range msgs {
			id := ids[i]
			if v311 {
				id = m.Topic[strings.LastIndex(m.Topic, "/")+1:]
			}
			seen[id] = true
		}
		var missing []string
		for w := 0; w < producers && len(missing) < 5; w++ {
			for i := 0; i < per && len(missing) < 5; i++ {
				if id := fmt.Sprintf("mq-%02d-%05d", w, i); !seen[id] {
					missing = append(missing, id)
				}
			}
		}
		return len(seen) >= producers*per, fmt.Sprintf("%d distinct of %d received; acknowledged, not received: %v", len(seen), len(msgs), missing)
	})
	counts := map[string]int{}
	last := map[string]string{}
	for i, m := range msgs {
		id := ids[i]
		if v311 {
			if id != "" {
				t.Fatalf("%s: user property message-id %q over MQTT 3.1.1", m.Topic, id)
			}
			id = m.Topic[strings.LastIndex(m.Topic, "/")+1:]
		}
		if !strings.HasPrefix(id, "mq-") {
			t.Fatalf("received %q on %s", id, m.Topic)
		}
		if !strings.HasPrefix(m.Topic, "plant/broker/node-") {
			t.Fatalf("topic %q", m.Topic)
		}
		var w, n int
		if _, err := fmt.Sscanf(id, "mq-%02d-%05d", &w, &n); err != nil || string(m.Payload) != fmt.Sprintf(`{"producer":%d,"i":%d}`, w, n) {
			t.Fatalf("%s arrived with payload %q", id, m.Payload)
		}
		counts[id]++
		producer := id[:strings.LastIndex(id, "-")]
		// A redelivery after the failover goes back to an earlier id:
		// order is checked on first arrivals.
		if counts[id] == 1 && inOrder {
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
	t.Logf("%d received for %d distinct ids", len(msgs), len(counts))
}

// Real processes and a real Mosquitto over TLS (client certificate, the
// broker's CA, user and password file) with an ACL: a message whose topic
// the broker does not authorize is answered 0x87 and parked with that
// answer; the messages around it are delivered in order.
func TestSFMQTTNotAuthorizedParksOverTLS(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{TLS: true, DenyTopics: []string{"plant/secret/#"}}, "test-recorder", "plant/#")
	c, active, _ := sfTargetCluster(t, "sf-mqtt-acl", fmt.Sprintf(
		"{name: broker, kind: mqtt, mqtt: {broker: %q, topic: \"plant/{id}\", username: scadad, password_file: %q, ca_file: %q, cert_file: %q, key_file: %q}, timeout: 5s, backoff_floor: 20ms, backoff_max: 500ms, max_in_flight: 1}",
		broker.TLSURL, broker.PasswordFile, broker.CAFile, broker.CertFile, broker.KeyFile))
	for _, id := range []string{"ok-1", "secret/1", "ok-2"} {
		if !enqueue(active, "broker", id, []byte(id)) {
			t.Fatalf("enqueue %s refused", id)
		}
	}
	var parked []*controlpb.SFMessage
	testwait.For(t, 30*time.Second, "secret/1 parked", func() bool {
		parked = nil
		ctlJSON(t, c, nil, &parked, "sf", "list", "--parked", "--target", "broker")
		return len(parked) == 1
	})
	if p := parked[0]; p.Id != "secret/1" || !strings.Contains(p.ParkReason, "0x87") {
		t.Fatalf("parked %+v; want secret/1 with the broker's 0x87", p)
	}
	testwait.For(t, 30*time.Second, "ok-1 and ok-2 received", func() bool {
		ids, _ := rec.IDs()
		return slices.Contains(ids, "ok-2")
	})
	ids, _ := rec.IDs()
	if ids[0] != "ok-1" || slices.Contains(ids, "secret/1") {
		t.Fatalf("received %v, want ok-1 then ok-2, never secret/1", ids)
	}
}

// awaitConnection waits until the broker's log names node's connection
// for target: a kill in a test is of an Active that delivers, and on a
// loaded machine the producers can reach the kill's count before its
// first connection.
func awaitConnection(t *testing.T, broker *testcluster.Mosquitto, node *testcluster.Node, target string) {
	t.Helper()
	testwait.For(t, 60*time.Second, node.ID+"'s connection in the broker's log", func() bool {
		log, err := broker.Log()
		return err == nil && strings.Contains(log, " as "+mqtttarget.ClientID(node.ID, target)+" ")
	})
}
