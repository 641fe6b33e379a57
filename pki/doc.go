// Package pki owns the site's certificates: it creates the site CA and the
// node and client certificates (Init, Generate*), and it turns certificate
// files into mutual-TLS configurations (LoadServerTLS, LoadClientTLS) that
// fail closed.
//
// Every TLS configuration this package returns requires TLS 1.3, trusts the
// site CA and nothing else, and demands a client certificate. Loading refuses,
// with an error naming the file and the problem, a missing or unparsable file,
// a certificate outside its validity window, a key that does not belong to its
// certificate and a certificate signed by a foreign CA.
//
// pki must not: fall back to plaintext or to the system roots, accept a
// certificate it could not verify, keep package-level state, or know about
// raft, gRPC or any other consumer of the configurations it builds.
package pki
