package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
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
//	GET  /alarms                     every alarm the gateway holds, JSON
//	POST /alarms/raise?id=&source=&severity=&condition=&message=&state=
//	POST /alarms/clear?id=
//	POST /alarms/ack?id=&operator=&comment=   a field-side acknowledgement
//	POST /alarms/script              body: an alarm script (ParseAlarmScript), played from now
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
	mux.HandleFunc("GET /alarms", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Alarms())
	})
	mux.HandleFunc("POST /alarms/raise", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		sev, err := strconv.ParseUint(q.Get("severity"), 10, 32)
		if err != nil {
			http.Error(w, "severity: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.RaiseAlarm(AlarmSpec{ID: q.Get("id"), Source: q.Get("source"), Severity: uint32(sev),
			Condition: q.Get("condition"), Message: q.Get("message"), State: q.Get("state")}); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /alarms/clear", func(w http.ResponseWriter, r *http.Request) {
		if err := s.ClearAlarm(r.URL.Query().Get("id")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /alarms/ack", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if err := s.AckAlarm(q.Get("id"), q.Get("operator"), q.Get("comment")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /alarms/script", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		steps, err := ParseAlarmScript(string(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		go s.RunAlarmScript(context.Background(), steps)
		fmt.Fprintf(w, "ok: %d steps\n", len(steps))
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
