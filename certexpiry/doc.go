// Package certexpiry watches when this node's certificate and the site CA
// lapse: it publishes both ends as a metric
// (scadad_tls_certificate_expiry_timestamp_seconds) and says so in the log
// as the day comes near, then again once it has passed.
//
// certexpiry must not: read certificate files (pki.ReadValidity does, and
// the daemon hands the result in), renew or replace a certificate, refuse
// a connection, or keep package-level state.
package certexpiry
