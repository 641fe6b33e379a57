package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// AdminHandler exposes the fault injection and counters over HTTP for the
// mxgw-sim binary:
//
//	GET  /stats                      counters as JSON
//	POST /reset-stats
//	POST /wedge?for=60s              hold the apartment
//	POST /drop?for=110s[&kinds=a,b]  run but never answer commands
//	POST /restart                    drop every session and queued command
//	POST /end-streams                end event streams gracefully
//	POST /capabilities?set=old|new
//	POST /config?cost=&per_tag=&deadline=&max_timeout=&change=&cost.<kind>=
func (s *Sim) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Stats())
	})
	mux.HandleFunc("POST /reset-stats", func(w http.ResponseWriter, _ *http.Request) {
		s.ResetStats()
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /wedge", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("for"))
		if err != nil {
			http.Error(w, "for: "+err.Error(), http.StatusBadRequest)
			return
		}
		s.Wedge(d)
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /drop", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("for"))
		if err != nil {
			http.Error(w, "for: "+err.Error(), http.StatusBadRequest)
			return
		}
		var kinds []string
		if k := r.URL.Query().Get("kinds"); k != "" {
			kinds = strings.Split(k, ",")
		}
		s.DropReplies(d, kinds...)
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /restart", func(w http.ResponseWriter, _ *http.Request) {
		s.Restart()
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /end-streams", func(w http.ResponseWriter, _ *http.Request) {
		s.EndEventStreams()
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /capabilities", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("set") {
		case "old":
			s.SetCapabilities(OldCapabilities())
		case "new":
			s.SetCapabilities(NewCapabilities())
		default:
			http.Error(w, "set must be old or new", http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /config", func(w http.ResponseWriter, r *http.Request) {
		if err := s.applyQuery(r.URL.Query()); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func (s *Sim) applyQuery(q map[string][]string) error {
	durations := map[string]time.Duration{}
	for key, vals := range q {
		if len(vals) == 0 {
			continue
		}
		switch {
		case key == "cost", key == "per_tag", key == "deadline", key == "max_timeout", key == "change", strings.HasPrefix(key, "cost."):
		default:
			return fmt.Errorf("unknown setting %q", key)
		}
		d, err := time.ParseDuration(vals[0])
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		durations[key] = d
	}
	s.Configure(func(c *Config) {
		for key, d := range durations {
			switch {
			case key == "cost":
				c.CommandCost = d
			case key == "per_tag":
				c.PerTagCost = d
			case key == "deadline":
				c.DefaultCommandTimeout = d
			case key == "max_timeout":
				c.MaxCommandTimeout = d
			case key == "change":
				c.ChangeInterval = d
			case strings.HasPrefix(key, "cost."):
				if c.CostByKind == nil {
					c.CostByKind = map[string]time.Duration{}
				}
				c.CostByKind[strings.TrimPrefix(key, "cost.")] = d
			}
		}
	})
	return nil
}
