// Package httpgate decides who may use a node's HTTP listener: producers
// enqueue with a client certificate from the site CA whose role allows it
// (producer, operator or admin), or with a bearer token the replicated
// state knows by its SHA-256, each limited to the targets it names;
// /metrics takes any site certificate or token unless it is left open;
// /health/* is open. It writes the refusals: 401 with a JSON body naming
// what is missing, 403 naming what is wrong.
//
// The TLS handshake (pki's configuration) has already verified a
// certificate against the site CA and its validity: httpgate reads only
// its role and targets, and asks whether it was revoked since (a request
// read from a connection just before it was closed), with no allocation
// on the enqueue hot path while the deny list is empty.
//
// httpgate must not: serve anything itself, parse bodies, or keep
// package-level state.
package httpgate
