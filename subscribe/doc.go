// Package subscribe keeps field subscriptions alive: one worker per
// (connection, instance) that subscribes the instance's tags and retries
// under the seeds' Lever 1 rules — at most one subscribe in flight until a
// lost-reply ceiling, exponential backoff with jitter that advances only on
// failure or presumed loss, reset on success and on the connection coming
// back Good, superseded replies ignored, and no spurious re-subscribe after a
// success. Concurrent subscribes from several instances on one connection
// are coalesced into one gateway call. Workers run while the node is Active
// (and, in hot-standby mode, read-only on the Standby too) and are
// reconfigured by difference.
//
// The guarded retry (Guard, Worker) is independent of what is subscribed:
// tag subscriptions use it, and so do alarm sources (one worker per
// (connection, alarm source), the seeds' "same amplifier, still unguarded"):
// an alarm subscribe's reply is the source's current conditions, handed to
// an AlarmSink only while its attempt is live, and the connection's
// active-alarm stream goes to the same sink.
//
// It owns no protocol (package gateway does) and no presentation: values and
// qualities go to a Sink the OPC UA server and history forwarding implement.
// It never writes to a device on its own: Manager.Route only resolves which
// running connection and tag a write, allowed by the OPC UA write gate,
// goes to.
package subscribe
