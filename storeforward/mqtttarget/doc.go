// Package mqtttarget is the MQTT kind of store-and-forward target: each
// message is published at QoS 1 to a topic made from the target's
// template, with the message id as the user property "message-id", and
// counts as delivered when the broker's PUBACK says success.
//
// A batch is pipelined, in batch order, without a PUBACK awaited between
// publishes: with MQTT 5 the sender adds each publish to the client's
// session and writes it itself, one after another (session.go; the
// connection, connection.go, gathers each packet into one write); the
// 3.1.1 client writes publishes in the order they are made and, with an
// ordered store, resends them in that order after a reconnect.
//
// It owns the broker connections of one delivery worker (MQTT 5 with
// eclipse/paho.golang autopaho; MQTT 3.1.1, protocol "3.1.1", with
// eclipse/paho.mqtt.golang, without properties or reason codes; the
// client id carries the node, so the two sides of a split never take
// each other's session). With MQTT 5 each delivery the worker may have
// under way has a connection, and a client id, of its own: a broker's
// receive maximum is per connection. It reads the password file at
// every connection and classifies PUBACK reason codes: "not
// authorized", "topic name invalid", "packet too large", "payload format
// invalid" park the message; anything else, and no answer, is retried.
//
// It must not: decide about retries, parking or order (package
// storeforward does), or connect before a Send (only the Active node
// connects).
package mqtttarget
