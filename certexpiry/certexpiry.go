package certexpiry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/scadad/scadad/pki"
)

// WarnBefore is how long before a certificate lapses the log starts
// saying so (the alert rules say it too, ScadadCertificateExpiresSoon).
const WarnBefore = 30 * 24 * time.Hour

// checkEvery is how often Run looks again: lapsing is counted in days.
const checkEvery = 12 * time.Hour

// Watch publishes when this node's certificate and the site CA lapse and
// says so in the log as the day comes near. Every Raft connection, peer
// link and API call needs them, and certificates issued together lapse
// together: on that day no node can reach another, so a witness site loses
// its Active and a bare pair splits.
type Watch struct {
	Validity pki.Validity
	Now      func() time.Time
	Log      zerolog.Logger
}

// Register adds scadad_tls_certificate_expiry_timestamp_seconds.
func Register(reg prometheus.Registerer, v pki.Validity) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "scadad_tls_certificate_expiry_timestamp_seconds",
		Help: "When the certificate this node uses expires (NotAfter, Unix seconds), by certificate (node: this node's own, ca: the site CA). Read at start: a renewed certificate shows after a restart.",
	}, []string{"certificate"})
	g.WithLabelValues("node").Set(float64(v.Cert.Unix()))
	g.WithLabelValues("ca").Set(float64(v.CA.Unix()))
	return reg.Register(g)
}

// Check logs a warning for a certificate that lapses within WarnBefore
// and an error for one that has lapsed; nothing while both are far off.
func (w Watch) Check() {
	now := w.Now()
	for _, c := range []struct {
		what, renew string
		until       time.Time
	}{
		{"node certificate", "renew it with scadactl certs issue --name NODE --overwrite and restart this node (the Standby first, then fail over)", w.Validity.Cert},
		{"site CA", "make a new one with scadactl certs init --overwrite, and new certificates for every node and client, then restart every node", w.Validity.CA},
	} {
		left := c.until.Sub(now)
		switch {
		case left <= 0:
			w.Log.Error().Time("expired", c.until).Str("renew", c.renew).
				Msgf("the %s has expired: other nodes and scadactl cannot connect to this node", c.what)
		case left <= WarnBefore:
			w.Log.Warn().Time("expires", c.until).Int("days_left", int(left.Hours()/24)).Str("renew", c.renew).
				Msgf("the %s expires soon: after that no node can reach this one", c.what)
		}
	}
}

// Run checks at start and twice a day until ctx ends.
func (w Watch) Run(ctx context.Context) error {
	w.Check()
	tick := time.NewTicker(checkEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			w.Check()
		}
	}
}
