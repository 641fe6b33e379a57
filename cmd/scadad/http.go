package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/httpgate"
	"github.com/scadad/scadad/internal/netguard"
	"github.com/scadad/scadad/role"
	"github.com/scadad/scadad/storeforward"
)

// confirmingRoles can confirm a stale Active role with a quorum round trip
// (raftnode's Acting).
type confirmingRoles interface {
	CurrentConfirmed(ctx context.Context) role.State
}

// healthConfirmWait bounds that confirmation: a load balancer's check
// waits longer, and a leader no quorum answers within it is not Active.
const healthConfirmWait = time.Second

// healthHandler serves /health/ready (200 once the node has joined a
// cluster and applied its state: any role but Detached) and /health/active
// (200 only on the Active node, for load balancers).
func healthMux(roles interface{ Current() role.State }, ready func() (bool, string), reg prometheus.Gatherer, profiles bool) *http.ServeMux {
	mux := http.NewServeMux()
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	write := func(w http.ResponseWriter, ok bool, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	}
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) {
		st := roles.Current()
		ok, why := ready()
		write(w, ok, map[string]any{"ready": ok, "role": st.Role.String(), "node": st.NodeID, "leader": st.Leader, "reason": why})
	})
	mux.HandleFunc("GET /health/active", func(w http.ResponseWriter, r *http.Request) {
		st := roles.Current()
		if c, ok := roles.(confirmingRoles); ok && st.Role != role.Active {
			// A leader whose quorum confirmation went stale (it ran on
			// after a freeze) confirms afresh before it answers no.
			ctx, cancel := context.WithTimeout(r.Context(), healthConfirmWait)
			st = c.CurrentConfirmed(ctx)
			cancel()
		}
		write(w, st.Role == role.Active, map[string]any{"active": st.Role == role.Active, "role": st.Role.String(), "node": st.NodeID, "epoch": st.Epoch.String()})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// maxOtherBodyBytes bounds the body of a request to anything but the
// enqueue endpoint (health, metrics and profiles take none).
const maxOtherBodyBytes = 64 << 10

// newHTTPServer serves the node's HTTP listener on fasthttp: the enqueue
// endpoint directly (every producer's hot path, where net/http's
// per-request work cost the most CPU: docs/performance.md), everything else (health,
// metrics, profiles: net/http handlers) through fasthttp's adaptor. A nil
// enqueue serves no enqueue endpoint. gate decides who may enqueue and
// read /metrics; /health/* is open to load balancers.
//
// Bodies are streamed (StreamRequestBody): fasthttp would otherwise
// allocate a body's announced Content-Length before a byte of it arrives,
// and 200 connections announcing 8 MiB each took the Active to 1.7 GB. The
// enqueue handler reads its body as it arrives, charged to bodies; the
// other routes get theirs read the same way, up to maxOtherBodyBytes.
func newHTTPServer(mux http.Handler, enqueue fasthttp.RequestHandler, gate *httpgate.Gate, bodies *netguard.BodyBudget, log zerolog.Logger) *fasthttp.Server {
	rest := fasthttpadaptor.NewFastHTTPHandler(mux)
	enqueuePath := []byte(storeforward.EnqueuePath)
	metricsPath, debugPath := []byte("/metrics"), []byte("/debug/")
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			path := ctx.Path()
			if enqueue != nil && bytes.HasPrefix(path, enqueuePath) {
				if gate.Enqueue(ctx, string(path[len(enqueuePath):])) {
					enqueue(ctx)
				}
				return
			}
			if (bytes.Equal(path, metricsPath) || bytes.HasPrefix(path, debugPath)) && !gate.Metrics(ctx) {
				return
			}
			if release, ok := readOtherBody(ctx, bodies); ok {
				defer release()
				rest(ctx)
			}
		},
		StreamRequestBody: true,
		// Every target's limit is at most fsm.MaxPayloadBytes; the
		// handler checks the target's own (a JSON 413).
		MaxRequestBodySize: fsm.MaxPayloadBytes,
		// A request must arrive within ReadTimeout (net/http had 5 s for
		// the headers alone); a kept-alive connection may idle longer.
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           5 * time.Minute,
		NoDefaultServerHeader: true,
		Logger:                fasthttpLogger{log},
	}
}

// readOtherBody reads the body of a request the net/http adaptor serves
// (the adaptor would read all of it, however large) within
// maxOtherBodyBytes and the body budget; false when it answered instead.
func readOtherBody(ctx *fasthttp.RequestCtx, bodies *netguard.BodyBudget) (func(), bool) {
	stream, announced := ctx.RequestBodyStream(), ctx.Request.Header.ContentLength()
	if stream == nil || announced == 0 || announced == -2 { // -2: no body (identity without a length)
		return func() {}, true
	}
	if announced > maxOtherBodyBytes {
		ctx.SetConnectionClose()
		ctx.Error(fmt.Sprintf("request body over %d bytes", maxOtherBodyBytes), fasthttp.StatusRequestEntityTooLarge)
		return nil, false
	}
	body, release, err := bodies.Read(stream, announced, maxOtherBodyBytes)
	if err != nil {
		ctx.SetConnectionClose()
		var tooBig *netguard.BodyTooLargeError
		switch {
		case errors.As(err, &tooBig):
			ctx.Error(err.Error(), fasthttp.StatusRequestEntityTooLarge)
		case errors.Is(err, netguard.ErrBodyBudget):
			ctx.Response.Header.Set("Retry-After", "1")
			ctx.Error(err.Error(), fasthttp.StatusServiceUnavailable)
		default:
			ctx.Error(err.Error(), fasthttp.StatusBadRequest)
		}
		return nil, false
	}
	ctx.Request.SetBodyRaw(body)
	return release, true
}

// fasthttpLogger routes fasthttp's connection errors (a client that went
// away mid-request, a malformed request) to debug: they are the client's.
type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug().Str("part", "http").Msgf(format, args...)
}

// httpTLS is the HTTP listener's TLS configuration: the node's certificate
// and the site CA, like the control API, but a client certificate is
// optional at the handshake (health checks present none; the gate asks for
// one where it is needed). One that is presented must verify.
func httpTLS(serverTLS *tls.Config) *tls.Config {
	c := serverTLS.Clone()
	c.ClientAuth = tls.VerifyClientCertIfGiven
	return c
}

// registerHTTPInsecure exports whether the HTTP listener is plain HTTP, so
// a lab setting left on in production shows on a dashboard.
func registerHTTPInsecure(reg prometheus.Registerer, insecure bool) error {
	v := 0.0
	if insecure {
		v = 1
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "scadad_http_insecure", Help: "1 while the HTTP listener serves plain HTTP without authentication (http.insecure: true)."})
	g.Set(v)
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("register scadad_http_insecure: %w", err)
	}
	return nil
}
