// Package pgtarget is the PostgreSQL (and TimescaleDB) kind of
// store-and-forward target: each batch of messages becomes rows of the
// target's table, inserted in one statement with the message id as the
// primary key (with the enqueue stamp on a table partitioned by time, as a
// TimescaleDB hypertable must be) and ON CONFLICT DO NOTHING, so a
// message delivered again around a failover is stored once: exactly once
// at the receiver.
//
// It owns the table's DDL (created if missing), the insert, reading the
// password file on every new connection (a rotated password is used
// from the next connection) and classifying the database's answers:
// a data or constraint error (SQLSTATE classes 22 and 23) is a permanent
// refusal of the message; everything else (the server down, a missing
// table or privilege, a timeout) is retried.
//
// It must not: decide about retries, parking or FIFO order (package
// storeforward does), or open connections before a Send (only the Active
// node connects).
package pgtarget
