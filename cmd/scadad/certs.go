package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/pki"
)

// certWarnBefore is how long before a certificate lapses the log starts
// saying so (the alert rules say it too, ScadadCertificateExpiresSoon).
const certWarnBefore = 30 * 24 * time.Hour

// certWatch publishes when this node's certificate and the site CA lapse
// and says so in the log as the day comes near. Every Raft connection, peer
// link and API call needs them, and certificates issued together lapse
// together: on that day no node can reach another, so a witness site loses
// its Active and a bare pair splits.
type certWatch struct {
	validity pki.Validity
	now      func() time.Time
	log      zerolog.Logger
}

// registerCertExpiry adds scadad_tls_certificate_expiry_timestamp_seconds.
func registerCertExpiry(reg prometheus.Registerer, v pki.Validity) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "scadad_tls_certificate_expiry_timestamp_seconds",
		Help: "When the certificate this node uses expires (NotAfter, Unix seconds), by certificate (node: this node's own, ca: the site CA). Read at start: a renewed certificate shows after a restart.",
	}, []string{"certificate"})
	g.WithLabelValues("node").Set(float64(v.Cert.Unix()))
	g.WithLabelValues("ca").Set(float64(v.CA.Unix()))
	return reg.Register(g)
}

// check logs a warning for a certificate that lapses within certWarnBefore
// and an error for one that has lapsed; nothing while both are far off.
func (w certWatch) check() {
	now := w.now()
	for _, c := range []struct {
		what, renew string
		until       time.Time
	}{
		{"node certificate", "renew it with scadactl certs issue --name NODE --overwrite and restart this node (the Standby first, then fail over)", w.validity.Cert},
		{"site CA", "make a new one with scadactl certs init --overwrite, and new certificates for every node and client, then restart every node", w.validity.CA},
	} {
		left := c.until.Sub(now)
		switch {
		case left <= 0:
			w.log.Error().Time("expired", c.until).Str("renew", c.renew).
				Msgf("the %s has expired: other nodes and scadactl cannot connect to this node", c.what)
		case left <= certWarnBefore:
			w.log.Warn().Time("expires", c.until).Int("days_left", int(left.Hours()/24)).Str("renew", c.renew).
				Msgf("the %s expires soon: after that no node can reach this one", c.what)
		}
	}
}

// run checks at start and twice a day until ctx ends.
func (w certWatch) run(ctx context.Context) {
	w.check()
	everyTick(ctx, 12*time.Hour, func() bool {
		w.check()
		return true
	})
}
