// Package field owns the vocabulary of tag values that every field source
// and every consumer of values share: a Value, its OPC DA quality word
// (Quality) and how that word maps to the OPC UA StatusCode a value is
// served with (Quality.Status, QualityOf); and the fan-out (Fanout) that
// hands every value from the sources to the consumers, keeping each
// attribute's latest value for a consumer that starts later.
//
// The sources (the MxAccess gateway client and its subscribe workers, the
// OPC UA client sessions in uaclient) produce values in these terms; the
// consumers (the OPC UA server's address space, history forwarding, limit
// alarms) read them.
//
// It must not talk to a source or a consumer itself: no gRPC, no OPC UA
// sessions, no store-and-forward; the consumers plug in through ServeFunc
// and History. It holds no package-level state.
package field
