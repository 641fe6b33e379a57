// Package sparkplug is the Sparkplug B kind of store-and-forward target:
// the Active node is a Sparkplug Edge Node and each instance a Device of
// it. A message is a tag history batch in the Sparkplug format (metrics
// named "<instance>/<attribute>", see storeforward.HistorySparkplug); it
// is published as the DDATA of each device it holds, with the metrics'
// aliases and the session's seq.
//
// It owns one Edge Node session per delivery worker: the MQTT 5
// connection (clean start, the NDEATH with the session's bdSeq as the
// will), the primary host application's STATE (no birth and no data while
// it is offline: the messages wait in the buffer), the NBIRTH and DBIRTHs,
// seq (0 at NBIRTH, then 1..255 and round again) and rebirth on an NCMD
// "Node Control/Rebirth"; each device's life in the session: born
// (DBIRTH, with its current values) by its first value, dead (DDEATH)
// once every value of it says its data source is lost
// (storeforward.SparkplugSourceLost) or its instance left the site, born
// again by a good value. A failed publish ends the session; the next Send
// starts a new one with the next bdSeq from the BirthCounter.
//
// It must not: decide about retries, parking or order (package
// storeforward does), connect before a Send (only the Active node
// connects), or keep bdSeq itself (it must increase across failovers, so
// the BirthCounter keeps it).
package sparkplug
