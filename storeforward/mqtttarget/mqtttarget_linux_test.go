//go:build linux

package mqtttarget

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/internal/testcluster"
	"github.com/scadad/scadad/internal/testwait"
	"github.com/scadad/scadad/storeforward"
)

// Against a real Mosquitto with a TLS listener that requires a client
// certificate, a password file and an ACL: a target with the broker's CA,
// a client certificate and user/password publishes; a publish the ACL
// denies is answered "not authorized" (0x87), a permanent refusal; a
// target without the client certificate cannot connect (transient).
func TestTLSClientCertificateAndNotAuthorizedOnARealBroker(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{TLS: true, DenyTopics: []string{"plant/secret/#"}}, "test-recorder", "plant/#")

	set := Settings{Broker: broker.TLSURL, Topic: "plant/{id}", Username: broker.Username, PasswordFile: broker.PasswordFile,
		CAFile: broker.CAFile, CertFile: broker.CertFile, KeyFile: broker.KeyFile}
	target := storeforward.Target{Name: "broker", Timeout: 5 * time.Second, MaxInFlight: 1, Settings: set}
	if err := (Kind{}).Validate(target); err != nil {
		t.Fatal(err)
	}
	snd := newTestSender(t, target)
	send := func(s storeforward.Sender, id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.Send(ctx, []*storeforward.Message{{ID: id, Payload: []byte("x")}})
	}
	if err := send(snd, "ok-1"); err != nil {
		t.Fatal(err)
	}
	var refusal *Refusal
	for try := 0; ; try++ {
		err := send(snd, "secret/1")
		if errors.As(err, &refusal) {
			break
		}
		// The broker may close before the client reads its refusal
		// (connection lost, transient): the retry is refused again.
		if err == nil || try == 2 {
			t.Fatalf("publish the ACL denies: %v, want a refusal", err)
		}
	}
	if refusal.Code != 0x87 || !refusal.Verdict().Permanent {
		t.Fatalf("publish the ACL denies: %v, want a permanent refusal with reason code 0x87", refusal)
	}
	// Mosquitto 2.0.11 closes the connection after the PUBACK that
	// refuses; a publish sent meanwhile is not answered on that
	// connection. Without a session to resume (session_expiry 0) it
	// fails when the connection drops, not at the attempt's timeout, and
	// the retry gets through.
	started := time.Now()
	err := send(snd, "ok-2")
	if took := time.Since(started); err != nil && took > 3*time.Second {
		t.Fatalf("ok-2 failed after %v (%v): a publish on a dropped connection waited for its timeout", took, err)
	}
	testwait.For(t, 20*time.Second, "ok-2 published", func() bool { return err == nil || send(snd, "ok-2") == nil })
	testwait.For(t, 5*time.Second, "ok-1 and ok-2 received", func() bool {
		ids, _ := rec.IDs()
		return len(ids) >= 2
	})
	if ids, _ := rec.IDs(); ids[0] != "ok-1" || ids[len(ids)-1] != "ok-2" || slices.Contains(ids, "secret/1") {
		t.Fatalf("received %v, want ok-1 then ok-2 (maybe twice), never secret/1", ids)
	}

	// A CA file means TLS, whatever the broker URL's scheme says.
	plain := set
	plain.Broker = strings.Replace(broker.TLSURL, "tls://", "mqtt://", 1)
	target.Settings = plain
	byCA, err := Kind{}.NewSender(target, storeforward.SenderEnv{NodeID: "node-c", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer byCA.Close()
	if err := send(byCA, "ok-4"); err != nil {
		t.Fatalf("publish to %s with a ca_file: %v, want TLS", plain.Broker, err)
	}

	// Without a client certificate the TLS listener lets no one in.
	set.CertFile, set.KeyFile = "", ""
	target.Settings = set
	nocert, err := Kind{}.NewSender(target, storeforward.SenderEnv{NodeID: "node-b", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer nocert.Close()
	if err := send(nocert, "ok-3"); err == nil || errors.As(err, &refusal) {
		t.Fatalf("publish without a client certificate: %v, want a connection failure", err)
	}
}

// An MQTT 3.1.1 target (protocol: 3.1.1) against the real broker, over
// TLS with the client certificate and the password: each message
// arrives, in order, on its {id} topic and without MQTT 5 properties (the
// recorder is an MQTT 5 client: a 5 publish would carry message-id).
func TestMQTT311OnARealBroker(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{TLS: true}, "test-recorder", "plant/#")
	target := storeforward.Target{Name: "broker", Timeout: 5 * time.Second, MaxInFlight: 1, Settings: Settings{
		Broker: broker.TLSURL, Topic: "plant/{target}/{id}", Protocol: Protocol311, Username: broker.Username, PasswordFile: broker.PasswordFile,
		CAFile: broker.CAFile, CertFile: broker.CertFile, KeyFile: broker.KeyFile}}
	if err := (Kind{}).Validate(target); err != nil {
		t.Fatal(err)
	}
	snd := newTestSender(t, target)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var batch []*storeforward.Message
	for _, id := range []string{"m1", "m2", "m3"} {
		batch = append(batch, &storeforward.Message{ID: id, Payload: []byte("payload of " + id)})
	}
	if err := snd.Send(ctx, batch); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "3 messages received", func() bool { return len(rec.Messages()) >= 3 })
	msgs := rec.Messages()
	ids, _ := rec.IDs()
	for i, id := range []string{"m1", "m2", "m3"} {
		if msgs[i].Topic != "plant/broker/"+id || string(msgs[i].Payload) != "payload of "+id || ids[i] != "" {
			t.Fatalf("message %d: topic %s payload %q message-id %q, want %s's, without properties", i, msgs[i].Topic, msgs[i].Payload, ids[i], id)
		}
	}
	bad := target
	bad.Settings = Settings{Broker: broker.TLSURL, Topic: "t", Protocol: "3"}
	if err := (Kind{}).Validate(bad); err == nil {
		t.Fatal("protocol 3 accepted")
	}
}

// A target in strict order (max_in_flight 1) publishes a batch without
// waiting for each PUBACK, and the broker still gets it in order, with MQTT
// 5 and 3.1.1: over a link whose answers take 25 ms, 200 publishes one
// PUBACK after another need at least 5 s; pipelined they take a fraction
// of it. Then 2,000 publishes straight to the broker arrive exactly in
// batch order.
func TestStrictOrderPipelinesPublishesInOrder(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{}, "test-recorder", "plant/#")
	const latency = 25 * time.Millisecond
	far := slowLinkTo(t, broker, latency)

	sendBatch := func(brokerURL, protocol, prefix string, n int) time.Duration {
		t.Helper()
		target := storeforward.Target{Name: "hist", Timeout: 30 * time.Second, MaxInFlight: 1, Settings: Settings{
			Broker: brokerURL, Topic: "plant/{target}/{id}", Protocol: protocol, Username: broker.Username, PasswordFile: broker.PasswordFile}}
		snd := newTestSender(t, target)
		defer snd.Close() // the next batch's sender has the same client id
		batch := make([]*storeforward.Message, n)
		for i := range batch {
			batch[i] = &storeforward.Message{ID: fmt.Sprintf("%s-%05d", prefix, i), Payload: []byte("v")}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// The first publish connects; the batch is timed on a live
		// connection.
		if err := snd.Send(ctx, []*storeforward.Message{{ID: prefix + "-connect", Payload: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		if err := snd.Send(ctx, batch); err != nil {
			t.Fatal(err)
		}
		return time.Since(started)
	}
	checkOrder := func(prefix string, n int) {
		t.Helper()
		var got []string
		testwait.For(t, 20*time.Second, fmt.Sprintf("%d %s messages received", n, prefix), func() bool {
			_, topics := rec.IDs()
			got = got[:0]
			for _, topic := range topics {
				if id := path.Base(topic); strings.HasPrefix(id, prefix+"-") && id != prefix+"-connect" {
					got = append(got, id)
				}
			}
			return len(got) >= n
		})
		for i, id := range got[:n] {
			if want := fmt.Sprintf("%s-%05d", prefix, i); id != want {
				t.Fatalf("%s: message %d received is %s, want %s (out of order)", prefix, i, id, want)
			}
		}
	}

	for _, protocol := range []string{"5", Protocol311} {
		t.Run("mqtt "+protocol, func(t *testing.T) {
			const farN = 200
			farPrefix, nearPrefix := "far"+protocol, "near"+protocol
			took := sendBatch("mqtt://"+far.Addr(), protocol, farPrefix, farN)
			if oneByOne := farN * latency; took >= oneByOne/2 {
				t.Fatalf("%d publishes over a %v link took %v; one PUBACK after another takes %v: not pipelined", farN, latency, took, oneByOne)
			}
			checkOrder(farPrefix, farN)

			sendBatch(broker.URL, protocol, nearPrefix, 2000)
			checkOrder(nearPrefix, 2000)
		})
	}
}

// A batch's last PUBACKs are not held back by the broker's Nagle
// algorithm (Mosquitto's default, set_tcp_nodelay false) waiting for this
// side's delayed acknowledgement (40 ms or more on Linux) when nothing
// follows them: 100 batches of 20 would take 4 s in such stalls alone.
func TestBatchEndsWithoutAnAcknowledgementStall(t *testing.T) {
	broker, err := testcluster.StartMosquittoWith(t.TempDir(), testcluster.MosquittoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Stop) // after the senders' own
	for _, protocol := range []string{"5", Protocol311} {
		target := storeforward.Target{Name: "hist", Timeout: 30 * time.Second, MaxInFlight: 1, Settings: Settings{
			Broker: broker.URL, Topic: "plant/{target}/{id}", Protocol: protocol, Username: broker.Username, PasswordFile: broker.PasswordFile}}
		snd := newTestSender(t, target)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := snd.Send(ctx, []*storeforward.Message{{ID: "connect", Payload: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		const batches, size = 100, 20
		started := time.Now()
		for b := range batches {
			batch := make([]*storeforward.Message, size)
			for i := range batch {
				batch[i] = &storeforward.Message{ID: fmt.Sprintf("m-%d-%d", b, i), Payload: make([]byte, 256)}
			}
			if err := snd.Send(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		if took := time.Since(started); took > 2*time.Second {
			t.Errorf("mqtt %s: %d batches of %d took %v: about %v a batch, stalled", protocol, batches, size, took, took/batches)
		}
	}
}

// Pipelined batches without a broker session to resume (session_expiry
// 0) across a broker restart: a batch the restart interrupts fails (its
// connection lost), is sent again whole, and every message arrives, the
// first arrival of each in batch order.
func TestPipelinedBatchesAcrossABrokerRestartWithoutASession(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{}, "test-recorder", "plant/#")
	target := storeforward.Target{Name: "hist", Timeout: 5 * time.Second, MaxInFlight: 1, Settings: Settings{
		Broker: broker.URL, Topic: "plant/{target}", Username: broker.Username, PasswordFile: broker.PasswordFile}}
	snd := newTestSender(t, target)
	const batches, size = 30, 200
	halfway := make(chan struct{})
	sent := make(chan error, 1)
	failures := 0 // read after sent
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		for b := range batches {
			batch := make([]*storeforward.Message, size)
			for i := range batch {
				batch[i] = &storeforward.Message{ID: fmt.Sprintf("m-%02d-%03d", b, i), Payload: []byte("v")}
			}
			// As the delivery worker does: the same batch again until
			// it is delivered.
			for {
				err := snd.Send(ctx, batch)
				if err == nil {
					break
				}
				if failures++; ctx.Err() != nil {
					sent <- fmt.Errorf("batch %d after %d failures: %w", b, failures, err)
					return
				}
				select {
				case <-time.After(50 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			if b == batches/3 {
				close(halfway)
			}
		}
		sent <- nil
	}()
	<-halfway
	broker.Stop()
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if failures == 0 {
		t.Fatal("no batch failed: the restart interrupted nothing")
	}
	t.Logf("%d attempts failed across the restart", failures)
	var first []string
	testwait.For(t, 30*time.Second, "every message received", func() bool {
		ids, _ := rec.IDs()
		seen := map[string]bool{}
		first = first[:0]
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				first = append(first, id)
			}
		}
		return len(first) >= batches*size
	})
	if !slices.IsSorted(first) {
		for i := 1; i < len(first); i++ {
			if first[i] < first[i-1] {
				t.Fatalf("%s first arrived after %s (FIFO broken)", first[i], first[i-1])
			}
		}
	}
}

// A target with max_in_flight 4 delivers four batches at once, each on a
// connection of its own: a broker lets one connection have its receive
// maximum of publishes awaiting their PUBACK (5 here), so four batches of
// 100 sharing one connection over a link whose answers take 25 ms need at
// least 400/5 round trips, 2 s; on four they need a quarter of that. The
// connections' client ids differ (else the broker would take one
// session from the other), and every message arrives.
func TestDeliveriesUnderWayEachHaveAConnection(t *testing.T) {
	broker, rec := testcluster.StartRecordedMosquitto(t, testcluster.MosquittoOptions{ReceiveMaximum: 5}, "test-recorder", "plant/#")
	const latency = 25 * time.Millisecond
	far := slowLinkTo(t, broker, latency)
	const slots, size = 4, 100
	snd := newTestSender(t, storeforward.Target{Name: "hist", Timeout: 30 * time.Second, MaxInFlight: slots, Settings: Settings{
		Broker: "mqtt://" + far.Addr(), Topic: "plant/{target}/{id}", Username: broker.Username, PasswordFile: broker.PasswordFile}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(prefix string, n int) <-chan error {
		batch := make([]*storeforward.Message, n)
		for i := range batch {
			batch[i] = &storeforward.Message{ID: fmt.Sprintf("%s-%03d", prefix, i), Payload: []byte("v")}
		}
		done := make(chan error, 1)
		go func() { done <- snd.Send(ctx, batch) }()
		return done
	}
	// Every connection up first: the batches are timed on live ones.
	var connecting []<-chan error
	for i := range slots {
		connecting = append(connecting, send(fmt.Sprintf("connect%d", i), 1))
	}
	for _, done := range connecting {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	started := time.Now()
	var sending []<-chan error
	for i := range slots {
		sending = append(sending, send(fmt.Sprintf("b%d", i), size))
	}
	for _, done := range sending {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(started)
	if shared := slots * size / 5 * latency; took >= shared*3/4 {
		t.Fatalf("%d batches of %d with a receive maximum of 5 took %v; on one connection they need at least %v", slots, size, took, shared)
	}
	testwait.For(t, 20*time.Second, "every message received", func() bool {
		ids, _ := rec.IDs()
		seen := map[string]bool{}
		for _, id := range ids {
			seen[id] = true
		}
		for i := range slots {
			for j := range size {
				if !seen[fmt.Sprintf("b%d-%03d", i, j)] {
					return false
				}
			}
		}
		return true
	})
}

// slowLinkTo is a proxy to broker's plain listener whose every answer
// takes latency, closed when the test ends.
func slowLinkTo(t *testing.T, broker *testcluster.Mosquitto, latency time.Duration) *testcluster.Proxy {
	t.Helper()
	u, err := url.Parse(broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	far, err := testcluster.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(far.Close)
	far.SetLatency(latency)
	return far
}

// newTestSender is target's sender on node-a, closed when the test ends
// (Close again is harmless).
func newTestSender(t *testing.T, target storeforward.Target) storeforward.Sender {
	t.Helper()
	snd, err := Kind{}.NewSender(target, storeforward.SenderEnv{NodeID: "node-a", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(snd.Close)
	return snd
}
