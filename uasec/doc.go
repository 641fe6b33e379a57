// Package uasec is the OPC UA security both of scadad's OPC UA sides
// share: the OPC UA server (package opcua) and the client sessions to
// upstream servers (package uaclient). It owns resolving a security policy
// and mode (Resolve), reading application certificates and keys, whether
// a certificate is trusted (TrustedBy), how a certificate is named to an
// operator (Thumbprint, DescribeCert), and the client connection that uses
// them (ClientOptions, Dial).
//
// It must not serve anything, keep a trust list on disk, or decide a
// role: it holds no state of its own.
package uasec
