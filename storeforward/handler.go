package storeforward

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/scadad/scadad/fsm"
	"github.com/scadad/scadad/internal/netguard"
)

// Handler serves the enqueue API:
//
//	POST /v1/sf/{target}    body = payload, optional Idempotency-Key header
//
// Answers: 201 {"id","duplicate":false} when stored, 200 {"id","duplicate":true}
// when the id was already stored, 400 for a malformed request, 404 with the
// known targets, 405 for another method, 413 over the target's payload limit,
// 415 for a compressed body, 507 when the target holds its max_pending, 503
// when there is no leader or quorum (retry with the same Idempotency-Key).
// The request's Content-Type travels with the message and is sent on
// delivery.
//
// It is a fasthttp handler: the endpoint is the hot path of every producer,
// where net/http's per-request work cost the most CPU (docs/performance.md).
// Serve it with StreamRequestBody: the body is then read here as it
// arrives, charged to EnqueuerOptions.Bodies, so a client announcing a
// large body and sending nothing costs next to nothing (fasthttp otherwise
// allocates the announced Content-Length before a byte arrives). A body
// announced over the target's limit is refused before it is read; a body
// while the budget is full is answered 503 (busy, retry).
func (e *Enqueuer) Handler() fasthttp.RequestHandler {
	return e.serveEnqueue
}

// EnqueuePath is where Handler serves; the daemon routes what starts with
// it there.
const EnqueuePath = "/v1/sf/"

type errorBody struct {
	Error        string   `json:"error"`
	Code         string   `json:"code"`
	Target       string   `json:"target,omitempty"`
	KnownTargets []string `json:"known_targets,omitempty"`
	Limit        int      `json:"limit,omitempty"`
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		ctx.Error("encode answer: "+err.Error(), fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(append(b, '\n'))
}

func (e *Enqueuer) serveEnqueue(ctx *fasthttp.RequestCtx) {
	target, ok := strings.CutPrefix(string(ctx.Path()), EnqueuePath)
	if !ok || target == "" || strings.Contains(target, "/") {
		writeJSON(ctx, fasthttp.StatusNotFound, errorBody{Code: "not_found", Error: fmt.Sprintf("no such path %q: enqueue with POST /v1/sf/{target}", ctx.Path())})
		return
	}
	if !ctx.IsPost() {
		ctx.Response.Header.Set("Allow", fasthttp.MethodPost)
		writeJSON(ctx, fasthttp.StatusMethodNotAllowed, errorBody{
			Code: "method_not_allowed", Error: fmt.Sprintf("method %s not allowed: enqueue with POST /v1/sf/{target}", ctx.Method()),
		})
		return
	}
	if ce := string(ctx.Request.Header.ContentEncoding()); ce != "" && !strings.EqualFold(ce, "identity") {
		writeJSON(ctx, fasthttp.StatusUnsupportedMediaType, errorBody{
			Code: "unsupported_content_encoding", Error: fmt.Sprintf("Content-Encoding %q is not supported: send the payload as is", ce),
		})
		return
	}
	t, ok := e.opts.Targets.Target(target)
	if !ok {
		e.writeError(ctx, &UnknownTargetError{Target: target, Known: e.opts.Targets.TargetNames()})
		return
	}
	limit := min(t.MaxPayloadBytes, fsm.MaxPayloadBytes)
	if announced := ctx.Request.Header.ContentLength(); announced > limit {
		// Not read: closing is cheaper than draining what is refused.
		ctx.SetConnectionClose()
		e.writeError(ctx, &PayloadTooLargeError{Target: target, Size: announced, Limit: limit})
		return
	}
	payload, release, err := e.readBody(ctx, limit)
	if err != nil {
		ctx.SetConnectionClose()
		var tooBig *netguard.BodyTooLargeError
		switch {
		case errors.As(err, &tooBig):
			writeJSON(ctx, fasthttp.StatusRequestEntityTooLarge, errorBody{Code: "payload_too_large", Target: target, Limit: limit,
				Error: fmt.Sprintf("payload exceeds target %s's limit of %d bytes", target, limit)})
		case errors.Is(err, netguard.ErrBodyBudget):
			ctx.Response.Header.Set("Retry-After", "1")
			writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody{Code: "busy",
				Error: "message not stored: " + err.Error() + "; retry with the same Idempotency-Key"})
		default:
			writeJSON(ctx, fasthttp.StatusBadRequest, errorBody{Code: "invalid", Error: err.Error()})
		}
		return
	}
	defer release()
	var headers []Header
	if ct := ctx.Request.Header.ContentType(); len(ct) > 0 {
		headers = append(headers, Header{Key: "Content-Type", Value: string(ct)})
	}
	res, err := e.Enqueue(ctx, target, payload, strings.TrimSpace(string(ctx.Request.Header.Peek(HeaderIdempotencyKey))), headers)
	if err != nil {
		e.writeError(ctx, err)
		return
	}
	status := fasthttp.StatusCreated
	if res.Duplicate {
		status = fasthttp.StatusOK
	}
	writeJSON(ctx, status, res)
}

// readBody reads the request's body, at most limit bytes, charging it to
// the body budget while it is held (release gives it back). The payload is
// a buffer of its own: fasthttp reuses its buffers once the handler returns.
func (e *Enqueuer) readBody(ctx *fasthttp.RequestCtx, limit int) ([]byte, func(), error) {
	if stream := ctx.RequestBodyStream(); stream != nil {
		return e.opts.Bodies.Read(stream, ctx.Request.Header.ContentLength(), limit)
	}
	body := ctx.PostBody()
	if len(body) > limit {
		return nil, nil, &netguard.BodyTooLargeError{Limit: limit}
	}
	return e.opts.Bodies.Read(bytes.NewReader(body), len(body), limit)
}

func (e *Enqueuer) writeError(ctx *fasthttp.RequestCtx, err error) {
	var (
		unknown *UnknownTargetError
		tooBig  *PayloadTooLargeError
		full    *TargetFullError
	)
	switch {
	case errors.As(err, &unknown):
		writeJSON(ctx, fasthttp.StatusNotFound, errorBody{Code: "unknown_target", Error: err.Error(), Target: unknown.Target, KnownTargets: unknown.Known})
	case errors.As(err, &tooBig):
		writeJSON(ctx, fasthttp.StatusRequestEntityTooLarge, errorBody{Code: "payload_too_large", Error: err.Error(), Target: tooBig.Target, Limit: tooBig.Limit})
	case errors.As(err, &full):
		writeJSON(ctx, fasthttp.StatusInsufficientStorage, errorBody{Code: "target_full", Error: err.Error(), Target: full.Target, Limit: full.Limit})
	case errors.Is(err, ErrInvalid):
		writeJSON(ctx, fasthttp.StatusBadRequest, errorBody{Code: "invalid", Error: err.Error()})
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrClosed):
		ctx.Response.Header.Set("Retry-After", "1")
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody{Code: "unavailable",
			Error: "no leader or quorum, message not known to be stored; retry with the same Idempotency-Key: " + err.Error()})
	default:
		// The server is shutting down (the request's context ended): the
		// outcome is unknown.
		ctx.Response.Header.Set("Retry-After", "1")
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody{Code: "unknown_outcome",
			Error: "the message may or may not be stored; retry with the same Idempotency-Key: " + err.Error()})
	}
}
