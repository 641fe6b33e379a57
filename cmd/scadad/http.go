package main

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/scadad/scadad/role"
)

// healthHandler serves /health/ready (200 once the node has joined a
// cluster and applied its state: any role but Detached) and /health/active
// (200 only on the Active node, for load balancers).
func healthMux(roles interface{ Current() role.State }, ready func() (bool, string), reg prometheus.Gatherer, enqueue http.Handler, profiles bool) *http.ServeMux {
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
		write(w, st.Role == role.Active, map[string]any{"active": st.Role == role.Active, "role": st.Role.String(), "node": st.NodeID, "epoch": st.Epoch.String()})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if enqueue != nil {
		mux.Handle("/v1/sf/", enqueue)
	}
	return mux
}
