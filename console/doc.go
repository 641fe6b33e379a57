// Package console serves the operator's status page: one screen for the
// whole site, the same from whichever node serves it, at GET / on the
// node's HTTP listener, and the JSON API the page reads and acts through
// under /ui/api/.
//
// It owns the page's assets (embedded: plants are air-gapped, so no CDN;
// plain HTML, CSS and JavaScript with SVG charts, so no build step and
// nothing third-party to vendor), the site view it assembles from this
// node's control server and its peers' (their Status over the control
// API), the last 15 minutes of samples behind the live charts (a bounded
// ring, in memory), and the timeline it draws from the replicated audit
// trail.
//
// Reads are for viewers, actions (retry or discard parked messages) for
// operators: Authorize decides which a request is. On a TLS listener the
// daemon uses CertificateRoles (the client certificate's role, as on the
// control API); on a plain-HTTP lab listener (http.insecure) loopback
// clients act and everyone else reads.
//
// console must not: decide or change anything itself (an action is the
// control server's SFRetry or SFDiscard, with what that records), keep
// package-level state, or reach anything but this node's control server
// and its peers' control APIs.
package console
