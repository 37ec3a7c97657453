// Package api serves the message API (BRIDGE_API_ADDR, docs/contract.md section 6):
// POST /v1/messages, GET and DELETE /v1/messages/{id}, GET /v1/stats. It validates a
// message exactly as ingress does (intake.Rules.Prepare) and parks it in the delay store.
package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/ui"
	"github.com/delaybridge/delaybridge/ingress"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/events"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/schedule"
)

// Store is what the message API needs of the delay store. Safe for concurrent use.
type Store interface {
	Park(ctx context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error)
	// GetKey reads the message id of ordering key key ("" none).
	GetKey(ctx context.Context, id, key string) (delaystore.Message, error)
	// CancelKeyAt deletes the message id of ordering key key ("" none) and remembers the
	// cancel, at (unix ms) being its time.
	CancelKeyAt(ctx context.Context, id, key string, at int64) (bool, error)
	Stats(ctx context.Context) (delaystore.Stats, error)
}

// Admin is what the operator's endpoints need of the operator's side of the store
// (admin.Admin): the message list, the audit log and the resumable bulk operations, the
// targets and quotas, the fleet's counts, and the cursors every page hands out, sealed for
// the query they continue. Safe for concurrent use. A nil Admin: those endpoints answer
// 501, and changes are not recorded.
type Admin interface {
	Lister
	OpStore
	Targeter
	FleetReader
	// Seal returns the cursor of position raw of a query of kind (admin.Cursor*).
	Seal(kind, query, raw string) string
	// Open returns the position of cursor v, sealed for kind and query, or an error
	// wrapping admin.ErrBadCursor; it may read the cursor key from Redis.
	Open(ctx context.Context, kind, query, v string) (string, error)
}

// Config configures the message API.
type Config struct {
	// Rules validate messages exactly as ingress does.
	Rules intake.Rules
	// DefaultBroker resolves an unprefixed target: "nats" when NATS is configured, else "kafka".
	DefaultBroker string
	// Token, when set, is the bearer token every request must carry.
	Token string
	// Hosts are the DNS names, besides localhost, that a request's Host may give when no
	// Token is set (BRIDGE_API_HOSTS; each as [CheckHostName] accepts it): any other name
	// is refused with 403 host_not_allowed (hostGuard: DNS rebinding). IP literals are
	// always allowed; with a Token every host is.
	Hosts []string
	// Metrics, when set, counts the API's messages in delaybridge_messages_in_total with
	// broker "http" (parked, invalid by reason, cancelled).
	Metrics *ingress.Metrics
	// MaxInflightBytes bounds the request-body bytes read at once over all requests
	// (BRIDGE_API_MAX_INFLIGHT_BYTES); it is raised to one largest request
	// ([Config.MaxBodyBytes]) when smaller. 0: [DefaultMaxInflightBytes].
	MaxInflightBytes int64
	// Now is the local clock a message's receipt time is read from (a relative delay
	// counts from receipt, as in ingress); default time.Now.
	Now func() time.Time
	// Gatherer, when set, is the bridge's metrics registry: GET /v1/overview reads its
	// counters and lateness histogram.
	Gatherer prometheus.Gatherer
	// Started is when Gatherer's counters began (GET /v1/overview's since); default: when
	// New is called.
	Started time.Time
	// RedisErr, when set, is the Redis monitor's state for GET /v1/overview (nil: up).
	RedisErr func() error
	// Lookalikes, when set, warns about and counts the names in a POST's headers object
	// that look like a contract header's (x-dealy), as ingress does for brokers.
	Lookalikes *intake.Lookalikes

	// DeadLetters, by broker name ("nats", "kafka"), are the dead-letter stores that
	// GET /v1/dead-letters and POST /v1/dead-letters/redrive read (deadletters.go).
	DeadLetters map[string]DeadLetters
	// RedriveHook, when set, is told of every redrive through the API (the audit log).
	RedriveHook RedriveHook
	// Events, when set, serves GET /v1/events and is told of every change made through
	// the API (docs/design.md "Live events"); nil: 501.
	Events *events.Hub

	// bulkBudget replaces the 10 s that a bulk request works (tests).
	bulkBudget time.Duration
	// redriveBudget replaces the 40 s that a redrive request works (tests).
	redriveBudget time.Duration
}

// DefaultMaxInflightBytes is the default of Config.MaxInflightBytes (32 MiB).
const DefaultMaxInflightBytes = 32 << 20

// MaxBodyBytes is the largest request body accepted: twice the payload limit (base64
// and JSON escaping) plus 64 KiB for the other fields and headers.
func (c Config) MaxBodyBytes() int64 {
	return int64(c.Rules.MaxPayload)*2 + 64<<10
}

// NewAPI returns the message API handler (docs/contract.md section 6):
// POST /v1/messages, GET and DELETE /v1/messages/{id}[?ordering_key=K], GET /v1/stats.
//
// Without a token, a request whose Host is a DNS name other than localhost and
// cfg.Hosts is refused first, on every route (the console too), with 403
// host_not_allowed (hostGuard). A change (POST, DELETE) that a browser sent from another
// origin is refused next, with 403, token or not (crossOrigin). Every request is then authenticated (when a token is
// set): a 401 is answered with Connection: close and the body is never read. A POST whose
// Content-Type is not application/json gets 415 unread (requireJSON), and a body must hold
// one JSON value, nothing after it (400). A request body is then limited to
// cfg.MaxBodyBytes (a larger Content-Length gets 413 unread) and its bytes are reserved
// from the MaxInflightBytes budget before it is read; when the budget is spent the answer
// is 503 with Retry-After, at once and without reading the body.
func New(cfg Config, store Store, adm Admin, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	budget := cfg.MaxInflightBytes
	if budget <= 0 {
		budget = DefaultMaxInflightBytes
	}
	budget = max(budget, cfg.MaxBodyBytes())
	a := &api{cfg: cfg, store: store, admin: adm, log: logger.With("component", "api"), inflight: semaphore.NewWeighted(budget),
		redrives: make(chan struct{}, redriveAtOnce)}
	top := a.top()
	if cfg.Token != "" {
		return crossOrigin(top)
	}
	return hostGuard(cfg.Hosts, crossOrigin(top))
}

// top routes the console and the OpenAPI document, which hold no data and take no token,
// and everything else through the token check to routes. The console's page answers 401
// without the token (its body still the page, which asks for it); its script and style
// hold no data (docs/design.md, "Web console").
func (a *api) top() *mux {
	top := newMux()
	top.Handle("GET /ui/", ui.Handler(a.authorized))
	top.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	top.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	top.HandleFunc("/v1/openapi.json", methodNotAllowed("GET, HEAD"))
	top.Handle("/", a.auth(a.limitBody(a.routes())))
	return top
}

// withDefaults is c with its unset clock, start and budgets set.
func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Started.IsZero() {
		c.Started = c.Now()
	}
	if c.bulkBudget == 0 {
		c.bulkBudget = bulkBudget
	}
	if c.redriveBudget == 0 {
		c.redriveBudget = redriveBudget
	}
	return c
}

// routes are the message API's endpoints; any other method or path gets a JSON answer
// like every other error (405 with Allow, or 404). Each route is in openapi.json too
// (TestOpenAPIRoutes).
func (a *api) routes() *mux {
	mux := newMux()
	mux.Handle("POST /v1/messages", requireJSON(http.HandlerFunc(a.post)))
	mux.HandleFunc("GET /v1/messages", a.list)
	mux.HandleFunc("GET /v1/messages/{id}", a.get)
	mux.HandleFunc("DELETE /v1/messages/{id}", a.deleteAudited)
	mux.HandleFunc("GET /v1/stats", a.stats)
	mux.HandleFunc("GET /v1/targets", a.targets)
	mux.Handle("POST /v1/targets/pause", requireJSON(http.HandlerFunc(a.pauseTarget)))
	mux.Handle("POST /v1/targets/resume", requireJSON(http.HandlerFunc(a.resumeTarget)))
	mux.HandleFunc("GET /v1/forecast", a.forecast)
	mux.HandleFunc("GET /v1/overview", a.overview)
	mux.Handle("POST /v1/bulk/{op}", requireJSON(http.HandlerFunc(a.bulk)))
	mux.HandleFunc("GET /v1/dead-letters", a.deadLetters)
	mux.Handle("POST /v1/dead-letters/redrive", requireJSON(http.HandlerFunc(a.redrive)))
	mux.Handle("POST /v1/dead-letters/purge", requireJSON(http.HandlerFunc(a.purge)))
	mux.HandleFunc("GET /v1/dead-letters/counts", a.deadLetterCounts)
	mux.HandleFunc("GET /v1/dead-letters/{id}", a.deadLetter)
	mux.Handle("POST /v1/bulk/resume", requireJSON(http.HandlerFunc(a.resume)))
	mux.HandleFunc("GET /v1/audit", a.auditList)
	mux.HandleFunc("GET "+eventsPath, a.events)
	mux.HandleFunc(eventsPath, methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("/v1/audit", methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("/v1/messages", methodNotAllowed("GET, HEAD, POST"))
	mux.HandleFunc("/v1/messages/{id}", methodNotAllowed("GET, HEAD, DELETE"))
	mux.HandleFunc("/v1/stats", methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("/v1/targets", methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("/v1/targets/pause", methodNotAllowed("POST"))
	mux.HandleFunc("/v1/targets/resume", methodNotAllowed("POST"))
	mux.HandleFunc("/v1/forecast", methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("/v1/overview", methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("/v1/bulk/{op}", methodNotAllowed("POST"))
	mux.HandleFunc("/v1/dead-letters", methodNotAllowed("GET, HEAD"))
	mux.HandleFunc("/v1/dead-letters/{id}", deadLetterPathNotAllowed)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
	return mux
}

type api struct {
	cfg      Config
	store    Store
	admin    Admin // nil: the operator's endpoints answer 501
	log      *slog.Logger
	inflight *semaphore.Weighted // request-body bytes being read or decoded
	redrives chan struct{}       // a slot per redrive running (redriveAtOnce)
}

// limitBody caps a request's body at MaxBodyBytes and holds its bytes in the in-flight
// budget while the request is served.
func (a *api) limitBody(next http.Handler) http.Handler {
	limit := a.cfg.MaxBodyBytes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > limit {
			refuse(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes: the limit is %d", r.ContentLength, limit))
			return
		}
		n := r.ContentLength
		if n < 0 { // chunked: reserve the most it may be
			n = limit
		}
		if !a.inflight.TryAcquire(n) {
			w.Header().Set("Retry-After", "1")
			refuse(w, http.StatusServiceUnavailable, "too many request bytes in flight (BRIDGE_API_MAX_INFLIGHT_BYTES): retry later")
			return
		}
		defer a.inflight.Release(n)
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries the API token (always, when none is set).
func (a *api) authorized(r *http.Request) bool {
	if a.cfg.Token == "" {
		return true
	}
	// RFC 9110: the auth scheme is case-insensitive ("bearer" works too).
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(token), []byte(a.cfg.Token)) == 1
}

func (a *api) auth(next http.Handler) http.Handler {
	if a.cfg.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="delaybridge"`)
			refuse(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *api) post(w http.ResponseWriter, r *http.Request) {
	received := a.cfg.Now()
	var req httpapi.PostRequest
	if err := decodeBody(r.Body, &req); err != nil { // limited by limitBody
		if !writeBodyError(w, err) {
			a.cfg.Metrics.Invalid("http", contract.ReasonInvalidRequest)
		}
		return
	}
	in, err := a.incoming(req, received)
	if err != nil {
		a.cfg.Metrics.Invalid("http", contract.ReasonInvalidRequest)
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": "+err.Error())
		return
	}
	a.cfg.Lookalikes.Check(in.Headers, in.Source)
	park, err := a.cfg.Rules.Prepare(in, a.cfg.Now())
	if err != nil {
		a.cfg.Metrics.Invalid("http", intake.Reason(err))
		writeError(w, http.StatusBadRequest, fieldNames.Replace(intake.ErrorText(err)))
		return
	}
	parked, err := a.store.Park(r.Context(), []delaystore.ParkRequest{park})
	if err == nil && len(parked) != 1 {
		err = fmt.Errorf("park: %d results for 1 message", len(parked))
	}
	if err != nil {
		a.log.Warn("park from api", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	if parked[0].Cancelled {
		// A cancel of the id at or after this request's receipt time is remembered.
		a.cfg.Metrics.Count("http", "cancelled_on_arrival", 1)
		writeError(w, http.StatusConflict, "cancelled: a cancel of this id at or after this request is remembered for BRIDGE_CANCEL_WINDOW")
		return
	}
	if parked[0].OverQuota {
		// The target's BRIDGE_TARGET_QUOTA pattern is full: nothing parked, nothing
		// dead-lettered (the caller has the answer); retry after deliveries or cancels.
		a.cfg.Metrics.Invalid("http", contract.ReasonQuotaExceeded)
		writeError(w, http.StatusTooManyRequests, contract.ReasonQuotaExceeded+": target "+park.Envelope.Target+" is at its BRIDGE_TARGET_QUOTA limit")
		return
	}
	a.cfg.Metrics.Count("http", "parked", 1)
	a.log.Debug("parked", "id", parked[0].ID, "due", parked[0].Due, "target", park.Envelope.Target)
	a.emit("park", parked[0].ID, park.Envelope.Target, parked[0].Due, 1)
	writeJSON(w, http.StatusCreated, httpapi.PostResponse{ID: parked[0].ID, Due: parked[0].Due, InDelivery: parked[0].InDelivery})
}

// incoming turns a POST body into the header form ingress validates, so the API and the
// brokers share one grammar.
func (a *api) incoming(req httpapi.PostRequest, received time.Time) (intake.Incoming, error) {
	var hs headers.List
	keys := make([]string, 0, len(req.Headers))
	for k := range req.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		hs.Add(k, req.Headers[k])
	}
	if req.Target != "" {
		hs.Add(contract.HeaderTarget, req.Target)
	}
	if req.ID != "" {
		hs.Add(contract.HeaderID, req.ID)
	}
	if req.OrderingKey != "" {
		hs.Add(contract.HeaderOrderingKey, req.OrderingKey)
	}
	if req.Every != "" {
		hs.Add(contract.HeaderEvery, req.Every)
	}
	if req.Misfire != "" {
		hs.Add(contract.HeaderMisfire, req.Misfire)
	}
	for _, f := range []struct {
		name, header string
		raw          json.RawMessage
	}{{"delay", contract.HeaderDelay, req.Delay}, {"deliver_at", contract.HeaderDeliverAt, req.DeliverAt},
		{"expires", contract.HeaderExpires, req.Expires}, {"window", contract.HeaderWindow, req.Window},
		{"max_wait", contract.HeaderMaxWait, req.MaxWait}} {
		if len(f.raw) == 0 || bytes.Equal(f.raw, []byte("null")) {
			continue
		}
		v, err := stringOrInt(f.raw)
		if err != nil {
			return intake.Incoming{}, fmt.Errorf("%s: %w", f.name, err)
		}
		hs.Add(f.header, v)
	}
	var payload []byte
	switch {
	case req.Payload != nil && req.PayloadBase64 != nil:
		return intake.Incoming{}, errors.New("give payload or payload_base64, not both")
	case req.Payload != nil:
		payload = []byte(*req.Payload)
	case req.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			return intake.Incoming{}, fmt.Errorf("payload_base64: %w", err)
		}
		payload = p
	}
	return intake.Incoming{
		Headers:  hs,
		Payload:  payload,
		Broker:   a.cfg.DefaultBroker,
		Source:   "http",
		NewID:    watermill.NewULID,
		Received: received,
	}, nil
}

// fieldNames turns the header names in an ingress error into the JSON fields they came
// from ("missing target: no target header"); the bridge's own output headers stay.
var fieldNames = strings.NewReplacer(
	contract.HeaderHops, contract.HeaderHops, contract.HeaderDue, contract.HeaderDue,
	contract.HeaderSource, contract.HeaderSource, contract.HeaderError, contract.HeaderError,
	contract.HeaderExpires, "expires", contract.HeaderEvery, "every", contract.HeaderMisfire, "misfire", contract.HeaderWindow, "window", contract.HeaderMaxWait, "max_wait", contract.HeaderOrderingKey, "ordering_key", contract.HeaderID, "id",
	contract.HeaderDeliverAt, "deliver_at", contract.HeaderTarget, "target", contract.HeaderDelay, "delay")

// methodNotAllowed answers 405 in JSON, with the methods a path takes in Allow.
func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: allowed methods are %s", r.Method, r.URL.Path, allow))
	}
}

// stringOrInt accepts a JSON string or a JSON integer and returns its text.
func stringOrInt(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return "", errors.New("must be a string or an integer")
	}
	if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
		return "", fmt.Errorf("must be a string or an integer, got %s", n)
	}
	return n.String(), nil
}

// get is GET /v1/messages/{id}[?ordering_key=K]: the pending message with that id and
// ordering key (none: a message without key); the same id with another key is another
// message (404).
func (a *api) get(w http.ResponseWriter, r *http.Request) {
	key, ok := orderingKey(w, r)
	if !ok {
		return
	}
	m, err := a.store.GetKey(r.Context(), r.PathValue("id"), key)
	if errors.Is(err, delaystore.ErrNotFound) || (err == nil && m.Envelope.OrderingKey != key) {
		writeError(w, http.StatusNotFound, notFound(key))
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	hs := map[string]string{}
	for _, h := range m.Envelope.Headers {
		if headers.IsReserved(h.Key) {
			continue // bridge-internal (the ingress span context): never shown
		}
		// A null Kafka value (h.Null) shows as "", as NATS targets get it.
		if v, ok := hs[h.Key]; ok {
			hs[h.Key] = v + ", " + h.Value // repeated header: combined as HTTP does
		} else {
			hs[h.Key] = h.Value
		}
	}
	resp := httpapi.MessageResponse{
		ID: m.ID, Target: m.Envelope.Target, Due: m.Due, Source: m.Envelope.Source,
		Headers: hs, PayloadBase64: base64.StdEncoding.EncodeToString(m.Envelope.Payload),
		Attempts: m.Attempts, Every: m.Envelope.Every, OrderingKey: m.Envelope.OrderingKey, HeldBy: m.HeldBy,
	}
	if m.Envelope.Every != "" {
		resp.Misfire = misfireOf(m.Envelope)
	}
	if m.Envelope.Expires > 0 {
		ms := m.Envelope.Expires.Milliseconds()
		resp.Expires = &ms
	}
	if m.Envelope.Window > 0 {
		ms := m.Envelope.Window.Milliseconds()
		resp.Window = &ms
	}
	if m.Envelope.MaxWait > 0 {
		ms, by := m.Envelope.MaxWait.Milliseconds(), m.Envelope.DueBy
		resp.MaxWait, resp.DueBy = &ms, &by
	}
	writeJSON(w, http.StatusOK, resp)
}

// orderingKey reads a request's ?ordering_key= (the message's x-delay-ordering-key, ""
// when absent) by the header's rules (intake.ParseOrderingKey): given empty, twice or
// longer than 256 bytes it answers 400 invalid_ordering_key and reports false.
func orderingKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	var h headers.List
	for _, v := range r.URL.Query()["ordering_key"] {
		h.Add(contract.HeaderOrderingKey, v)
	}
	key, err := intake.ParseOrderingKey(h, false)
	if err != nil {
		writeError(w, http.StatusBadRequest, fieldNames.Replace(intake.ErrorText(err)))
		return "", false
	}
	return key, true
}

// notFound is the 404 text of a message id with ordering key key ("" none) that is not
// pending.
func notFound(key string) string {
	if key == "" {
		return "no pending message with that id (a message with an ordering key is named by id and ordering_key)"
	}
	return "no pending message with that id and ordering_key"
}

// misfireOf is the x-delay-misfire policy of a recurring message as the API shows it:
// "once" when none is stored (the default), else the stored one.
func misfireOf(env delaystore.Envelope) string {
	if env.Misfire == "" {
		return schedule.MisfireOnce.String()
	}
	return env.Misfire
}

func (a *api) stats(w http.ResponseWriter, r *http.Request) {
	s, err := a.store.Stats(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	resp := httpapi.StatsResponse{Parked: s.Parked, PerShard: s.PerShard, Now: s.Now}
	if s.NextDue >= 0 {
		resp.NextDue = &s.NextDue
	}
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // error texts name subjects like orders.> verbatim
	_ = enc.Encode(v)
}

// refuseCloseDelay is how long a refused connection stays half-open after the answer, so
// that the client reads the answer before the close (closing a socket with unread input
// sends a reset, which may destroy the answer in flight).
const refuseCloseDelay = 500 * time.Millisecond

// refuse answers status with {"error": msg} and Connection: close, and closes the
// connection without reading the request body. net/http itself would drain up to 256 KiB
// of an unread body after the handler, even with Connection: close, so the connection
// is taken over (hijacked) and the answer written by hand. Where hijacking is not
// possible (HTTP/2) it falls back to a normal answer.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Connection", "close")
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, status, msg)
		return
	}
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"error": strings.TrimSpace(msg)})
	h := w.Header().Clone()
	h.Set("Content-Type", "application/json")
	resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Header: h, Close: true,
		ContentLength: int64(body.Len()), Body: io.NopCloser(&body)}
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := resp.Write(rw); err == nil {
		_ = rw.Flush()
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	time.AfterFunc(refuseCloseDelay, func() { _ = conn.Close() })
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": strings.TrimSpace(msg)})
}
