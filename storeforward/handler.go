package storeforward

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/scadad/scadad/fsm"
)

// Handler serves the enqueue API:
//
//	POST /v1/sf/{target}    body = payload, optional Idempotency-Key header
//
// Answers: 201 {"id","duplicate":false} when stored, 200 {"id","duplicate":true}
// when the id was already stored, 400 for a malformed request, 404 with the
// known targets, 405 for another method, 413 over the target's payload limit,
// 415 for a compressed body, 503 when there is no leader or quorum (retry
// with the same Idempotency-Key). The request's Content-Type travels with
// the message and is sent on delivery.
func (e *Enqueuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/sf/{target}", e.serveEnqueue)
	return mux
}

type errorBody struct {
	Error        string   `json:"error"`
	Code         string   `json:"code"`
	Target       string   `json:"target,omitempty"`
	KnownTargets []string `json:"known_targets,omitempty"`
	Limit        int      `json:"limit,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (e *Enqueuer) serveEnqueue(w http.ResponseWriter, r *http.Request) {
	target := r.PathValue("target")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{
			Code: "method_not_allowed", Error: fmt.Sprintf("method %s not allowed: enqueue with POST /v1/sf/{target}", r.Method),
		})
		return
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		writeJSON(w, http.StatusUnsupportedMediaType, errorBody{
			Code: "unsupported_content_encoding", Error: fmt.Sprintf("Content-Encoding %q is not supported: send the payload as is", ce),
		})
		return
	}
	t, ok := e.opts.Targets.Target(target)
	if !ok {
		e.writeError(w, &UnknownTargetError{Target: target, Known: e.opts.Targets.TargetNames()})
		return
	}
	limit := min(t.MaxPayloadBytes, fsm.MaxPayloadBytes)
	if r.ContentLength > int64(limit) {
		e.writeError(w, &PayloadTooLargeError{Target: target, Size: int(min(r.ContentLength, 1<<31-1)), Limit: limit})
		return
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			e.writeError(w, &PayloadTooLargeError{Target: target, Size: limit + 1, Limit: limit})
			return
		}
		writeJSON(w, http.StatusBadRequest, errorBody{Code: "bad_body", Error: "read request body: " + err.Error()})
		return
	}
	var headers []Header
	if ct := r.Header.Get("Content-Type"); ct != "" {
		headers = append(headers, Header{Key: "Content-Type", Value: ct})
	}
	res, err := e.Enqueue(r.Context(), target, payload, strings.TrimSpace(r.Header.Get(HeaderIdempotencyKey)), headers)
	if err != nil {
		e.writeError(w, err)
		return
	}
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, res)
}

func (e *Enqueuer) writeError(w http.ResponseWriter, err error) {
	var (
		unknown *UnknownTargetError
		tooBig  *PayloadTooLargeError
		full    *TargetFullError
	)
	switch {
	case errors.As(err, &unknown):
		writeJSON(w, http.StatusNotFound, errorBody{Code: "unknown_target", Error: err.Error(), Target: unknown.Target, KnownTargets: unknown.Known})
	case errors.As(err, &tooBig):
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Code: "payload_too_large", Error: err.Error(), Target: tooBig.Target, Limit: tooBig.Limit})
	case errors.As(err, &full):
		writeJSON(w, http.StatusInsufficientStorage, errorBody{Code: "target_full", Error: err.Error(), Target: full.Target, Limit: full.Limit})
	case errors.Is(err, ErrInvalid):
		writeJSON(w, http.StatusBadRequest, errorBody{Code: "invalid", Error: err.Error()})
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrClosed):
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Code: "unavailable",
			Error: "no leader or quorum, message not known to be stored; retry with the same Idempotency-Key: " + err.Error()})
	default:
		// Context ended (client gone or deadline): the outcome is unknown.
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Code: "unknown_outcome", Error: err.Error()})
	}
}
