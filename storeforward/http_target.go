package storeforward

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/scadad/scadad/role"
)

// Batch body formats of an HTTP target (BatchFormat).
const (
	BatchJSON   = "json"   // one JSON array of message objects
	BatchNDJSON = "ndjson" // one message object per line
)

// HeaderMessageIDs lists a batch's message ids, in order, each
// percent-encoded (so a comma in an id cannot split it), comma-separated.
const HeaderMessageIDs = "X-Scadad-Message-Ids"

// BatchItem is one message of a batched HTTP delivery body. Payload holds
// a JSON payload as it is; any other payload travels as PayloadBase64.
type BatchItem struct {
	ID            string          `json:"id"`
	ContentType   string          `json:"content_type,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
}

// DeliveryError is a delivery the target answered with a non-2xx status.
type DeliveryError struct {
	Status int
	Body   string // the start of the answer
	// RetryAfter is the answer's Retry-After (429 and 503 only).
	RetryAfter time.Duration
}

// Verdict implements Refusal.
func (e *DeliveryError) Verdict() Verdict {
	return Verdict{Code: strconv.Itoa(e.Status), Permanent: httpPermanent(e.Status), RetryAfter: e.RetryAfter}
}

func (e *DeliveryError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("target answered %d", e.Status)
	}
	return fmt.Sprintf("target answered %d: %s", e.Status, e.Body)
}

func newHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// httpKind POSTs messages; client is the Deliverer's shared client.
type httpKind struct {
	client *http.Client
	now    func() time.Time
}

func (k httpKind) Validate(t Target) error {
	u, err := url.Parse(t.URL)
	if err != nil {
		return fmt.Errorf("target %s: url: %w", t.Name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("target %s: url %q is not an absolute http(s) URL", t.Name, t.URL)
	}
	for k := range t.Headers {
		if reservedHeader(k) {
			return fmt.Errorf("target %s: header %s is set by delivery and may not be configured", t.Name, k)
		}
	}
	switch t.BatchFormat {
	case "", BatchJSON, BatchNDJSON:
	default:
		return fmt.Errorf("target %s: batch format %q: want %s or %s", t.Name, t.BatchFormat, BatchJSON, BatchNDJSON)
	}
	return nil
}

func (k httpKind) NewSender(t Target, env SenderEnv) (Sender, error) {
	return &httpSender{cfg: t, epoch: env.Epoch, shared: k.client, now: k.now}, nil
}

// httpSender delivers one worker's messages.
type httpSender struct {
	cfg    Target
	epoch  role.Epoch
	shared *http.Client
	now    func() time.Time

	// client sends this target's deliveries when it has a CAFile (built
	// on first use); otherwise shared does.
	mu     sync.Mutex
	client *http.Client
}

// Send makes one delivery attempt: a single message as its own body (the
// target's batch_max_messages is 1), or a batch body.
func (s *httpSender) Send(ctx context.Context, batch []*Message) error {
	var (
		body    []byte
		headers = map[string]string{}
		key     string
	)
	if s.cfg.BatchMaxMessages <= 1 && len(batch) == 1 {
		m := batch[0]
		if err := sendable(m); err != nil {
			return err
		}
		body, key = m.Payload, m.ID
		for _, h := range m.Headers {
			headers[http.CanonicalHeaderKey(h.Key)] = h.Value
		}
		if headers["Content-Type"] == "" {
			headers["Content-Type"] = "application/octet-stream"
		}
	} else {
		var err error
		body, err = encodeBatch(batch, s.cfg.BatchFormat)
		if err != nil {
			return err
		}
		key = batchKey(batch)
		headers["Content-Type"] = "application/json"
		if s.cfg.BatchFormat == BatchNDJSON {
			headers["Content-Type"] = "application/x-ndjson"
		}
		ids := make([]string, len(batch))
		for i, m := range batch {
			ids[i] = url.QueryEscape(m.ID)
		}
		headers[HeaderMessageIDs] = strings.Join(ids, ",")
	}
	return s.post(ctx, body, key, headers)
}

// Unsendable is a message that cannot be put in an HTTP request: its id
// (the Idempotency-Key) or a header stored with it is not a valid header
// field. No attempt can change that, so it parks at once whatever park_on
// says (park_on is about the receiver's answers, and there is none).
type Unsendable struct {
	ID     string
	Reason string
}

func (e *Unsendable) Error() string {
	return fmt.Sprintf("message %q cannot be sent over HTTP: %s", e.ID, e.Reason)
}

// Verdict implements Refusal.
func (e *Unsendable) Verdict() Verdict {
	return Verdict{Code: "unsendable", Permanent: true, Unsendable: true}
}

// sendable checks what net/http would refuse to send of a message sent on
// its own (in a batch the ids travel percent-encoded and in the body). The
// enqueue refuses the same (headerProblem), so only messages stored before
// it did are parked for it.
func sendable(m *Message) error {
	if reason := headerProblem(m.ID, m.Headers); reason != "" {
		return &Unsendable{ID: m.ID, Reason: reason}
	}
	return nil
}

// headerProblem says why a message's id (sent as Idempotency-Key) or one
// of its headers cannot travel in an HTTP header, or "" when all can.
func headerProblem(id string, headers []Header) string {
	if !httpguts.ValidHeaderFieldValue(id) {
		return "its id is not a valid HTTP header value (for Idempotency-Key): control characters other than tab are not allowed"
	}
	for _, h := range headers {
		if !httpguts.ValidHeaderFieldName(h.Key) {
			return fmt.Sprintf("header name %q is not a valid HTTP header name", h.Key)
		}
		if !httpguts.ValidHeaderFieldValue(h.Value) {
			return fmt.Sprintf("the value of header %s is not a valid HTTP header value", h.Key)
		}
	}
	return ""
}

// batchKey is a batch's Idempotency-Key: the same messages in the same
// order give the same key, whichever node sends them.
func batchKey(batch []*Message) string {
	h := sha256.New()
	for _, m := range batch {
		h.Write([]byte(m.ID))
		h.Write([]byte{0})
	}
	return "batch-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// encodeBatch writes the batch body: a JSON array or NDJSON of BatchItem.
func encodeBatch(batch []*Message, format string) ([]byte, error) {
	var buf bytes.Buffer
	if format != BatchNDJSON {
		buf.WriteByte('[')
	}
	for i, m := range batch {
		item := BatchItem{ID: m.ID}
		for _, h := range m.Headers {
			if strings.EqualFold(h.Key, "Content-Type") {
				item.ContentType = h.Value
			}
		}
		if json.Valid(m.Payload) && len(m.Payload) > 0 {
			item.Payload = json.RawMessage(m.Payload)
		} else {
			item.PayloadBase64 = base64.StdEncoding.EncodeToString(m.Payload)
		}
		b, err := json.Marshal(item)
		if err != nil {
			return nil, fmt.Errorf("encode batch item %s: %w", m.ID, err)
		}
		if i > 0 && format != BatchNDJSON {
			buf.WriteByte(',')
		}
		buf.Write(b)
		if format == BatchNDJSON {
			buf.WriteByte('\n')
		}
	}
	if format != BatchNDJSON {
		buf.WriteByte(']')
	}
	return buf.Bytes(), nil
}

// post sends one body; ctx bounds the attempt.
func (s *httpSender) post(ctx context.Context, body []byte, key string, headers map[string]string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	for k, v := range s.cfg.Headers {
		req.Header.Set(k, v)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set(HeaderIdempotencyKey, key)
	req.Header.Set(HeaderEpoch, s.epoch.String())
	client, err := s.httpClient()
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL may carry credentials; the target name says where
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("post: no answer within %v", s.cfg.Timeout)
		}
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			// The target may have moved to a certificate of a CA
			// rotated into ca_file in place: read it again next time.
			s.dropClient()
		}
		return fmt.Errorf("post: %w", err)
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	// Drain a little more so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	derr := &DeliveryError{Status: resp.StatusCode, Body: string(bytes.TrimSpace(head))}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		derr.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), s.now())
	}
	return derr
}

// httpClient is the client for this target's deliveries: the shared one,
// or for a target with a CAFile one that trusts those CAs only. A CA file
// that cannot be read fails the attempt, as an unreachable target would
// (counted, retried, shown in sf stats), and is read again next time; so
// is one after the target's certificate failed verification (dropClient).
func (s *httpSender) httpClient() (*http.Client, error) {
	if s.cfg.CAFile == "" {
		return s.shared, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client, nil
	}
	pem, err := os.ReadFile(s.cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_file %s holds no PEM certificate", s.cfg.CAFile)
	}
	c := newHTTPClient()
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	s.client = c
	return c, nil
}

// dropClient lets go of the target's own client, if it has one, and its
// connections: the next attempt (or the next worker) builds another from
// the CA file as it is then.
func (s *httpSender) dropClient() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		s.client.CloseIdleConnections()
		s.client = nil
	}
}

// Close implements Sender.
func (s *httpSender) Close() { s.dropClient() }
