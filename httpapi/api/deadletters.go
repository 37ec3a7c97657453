package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/internal/redrive"
)

// Dead letters (docs/contract.md section 10; docs/design.md "Dead letters in the API"):
// limit's default and most, how long one page reads, the most ids one redrive takes, how
// long a redrive request works before it answers with more, how long it watches for
// letters refused again, and how many redrives one replica runs at once.
const (
	deadLettersDefault = 100
	deadLettersMax     = 1000
	deadLettersBudget  = 2 * time.Second
	redriveMaxIDs      = 1000
	redriveBudget      = 40 * time.Second
	redriveWait        = 2 * time.Second
	redriveAtOnce      = 4
)

// DeadLetters is one broker's dead-letter store as the API needs it
// (redrive.NATSLetters, redrive.KafkaLetters: the code of `bridge redrive`). Safe for
// concurrent use.
type DeadLetters interface {
	// List reads one page without changing anything (no consumer, no commit).
	List(ctx context.Context, q redrive.ListQuery) (redrive.Page, error)
	// Redrive sends the selected letters back to the ingress (a dry run counts them).
	Redrive(ctx context.Context, opts redrive.Options) (redrive.Counts, error)
	// CheckID reports whether id has the form of one of its letters' ids.
	CheckID(id string) error
	// Get opens one letter: redrive.ErrNotFound when there is none of that id.
	Get(ctx context.Context, id string) (redrive.Detail, error)
	// CanPurge is nil when Purge can delete letters, else why not.
	CanPurge() error
	// Purge deletes the selected letters (a dry run counts them).
	Purge(ctx context.Context, opts redrive.Options) (redrive.Counts, error)
}

// RedriveHook, when set (Config.RedriveHook), is told of every redrive through the API,
// dry runs included: the audit log's hook. Begin is called on the request's goroutine
// once the request was checked and before any letter is looked at; the function it
// returns is called once, on the same goroutine, with the outcome. Begin should not block
// for long: the redrive waits for it.
type RedriveHook interface {
	Begin(r *http.Request, op RedriveOp) (end func(RedriveOutcome))
}

// RedriveOp is a redrive about to run.
type RedriveOp struct {
	// Op is "redrive".
	Op string
	// Broker is "nats" or "kafka".
	Broker string
	// Selector is "reason=<code>" or "ids=<id>,<id>,...".
	Selector string
	DryRun   bool
}

// RedriveOutcome is what a redrive did.
type RedriveOutcome struct {
	// Matched letters were selected; Changed left the dead-letter store (sent back).
	Matched, Changed int
	// More: stopped at the time limit with letters to look at.
	More bool
	// Err is why it stopped early (nil: done, or More).
	Err error
}

// reasonCode is the form of a reason code (contract.Reason*): what a selector may name.
var reasonCode = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// deadLetterParams are GET /v1/dead-letters' query parameters.
var deadLetterParams = map[string]bool{"reason": true, "limit": true, "cursor": true, "broker": true}

// deadLetterStore is the dead-letter store of broker ("": the default one), or an error
// for the client.
func (a *api) deadLetterStore(broker string) (string, DeadLetters, error) {
	if len(a.cfg.DeadLetters) == 0 {
		return "", nil, errors.New("no dead-letter store: no broker configured")
	}
	if broker == "" {
		broker = a.cfg.DefaultBroker
		if _, ok := a.cfg.DeadLetters[broker]; !ok {
			for name := range a.cfg.DeadLetters {
				broker = name
			}
		}
	}
	d, ok := a.cfg.DeadLetters[broker]
	if !ok {
		names := make([]string, 0, len(a.cfg.DeadLetters))
		for name := range a.cfg.DeadLetters {
			names = append(names, name)
		}
		slices.Sort(names)
		return "", nil, fmt.Errorf("broker %q: not configured (%s)", broker, strings.Join(names, ", "))
	}
	return broker, d, nil
}

// deadLetters serves GET /v1/dead-letters: a page of dead letters, filtered by reason,
// with a sealed next_cursor. 400 for a bad parameter or cursor, 503 when the broker
// failed.
func (a *api) deadLetters(w http.ResponseWriter, r *http.Request) {
	if a.admin == nil {
		writeError(w, http.StatusNotImplemented, "this store cannot seal cursors")
		return
	}
	v := r.URL.Query()
	q, broker, err := deadLetterQuery(v)
	var d DeadLetters
	if err == nil {
		broker, d, err = a.deadLetterStore(broker)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": "+err.Error())
		return
	}
	query := fmt.Sprintf("%s\n%q", broker, q.Reason) // limit may change from page to page
	if s := v.Get("cursor"); s != "" {
		if q.From, err = a.admin.Open(r.Context(), admin.CursorDeadLetters, query, s); !cursorOK(w, err) {
			return
		}
	}
	page, err := d.List(r.Context(), q)
	if err != nil {
		a.log.Warn("list dead letters", "broker", broker, "err", err)
		writeError(w, http.StatusServiceUnavailable, "dead letters unavailable: "+err.Error())
		return
	}
	out := httpapi.DeadLettersResponse{DeadLetters: make([]httpapi.DeadLetter, len(page.Letters))}
	for i, l := range page.Letters {
		out.DeadLetters[i] = httpapi.DeadLetter{ID: l.ID, Reason: l.Reason, Error: l.Error, Target: l.Target, At: l.At, Size: l.Size}
	}
	if page.Next != "" {
		c := a.admin.Seal(admin.CursorDeadLetters, query, page.Next)
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
}

// deadLetterQuery checks GET /v1/dead-letters' parameters, but for the cursor.
func deadLetterQuery(v url.Values) (redrive.ListQuery, string, error) {
	q := redrive.ListQuery{Limit: deadLettersDefault, Budget: deadLettersBudget}
	for name, vals := range v {
		switch {
		case !deadLetterParams[name]:
			return q, "", fmt.Errorf("unknown parameter %q (reason, limit, cursor, broker)", name)
		case len(vals) != 1:
			return q, "", fmt.Errorf("parameter %q given %d times", name, len(vals))
		}
	}
	if q.Reason = v.Get("reason"); q.Reason != "" && !reasonCode.MatchString(q.Reason) {
		return q, "", fmt.Errorf("reason %q: want a reason code such as publish_failed (a-z, 0-9, _; at most 64)", shorten(q.Reason))
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > deadLettersMax {
			return q, "", fmt.Errorf("limit %q: want 1 to %d", shorten(s), deadLettersMax)
		}
		q.Limit = n
	}
	return q, v.Get("broker"), nil
}

// shorten cuts a client's value for an error text.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// redrive serves POST /v1/dead-letters/redrive: what `bridge redrive` does, by reason or
// by ids, with a dry run. It answers 400 for a bad request, 429 when this replica runs
// redriveAtOnce redrives already, 503 when the broker failed (letters handled before
// stay handled), else 200 with the counts.
func (a *api) redrive(w http.ResponseWriter, r *http.Request) {
	c, ok := a.deadLetterCall(w, r)
	if !ok {
		return
	}
	req, broker, d, opts, sel := c.req, c.broker, c.d, c.opts, c.sel
	release, ok := a.redriveSlot(w)
	if !ok {
		return
	}
	defer release()
	end, err := a.redriveBegun(r, broker, sel, req)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable (audit log): "+err.Error())
		return
	}
	opts.Until = time.Now().Add(a.cfg.redriveBudget)
	if !req.DryRun {
		opts.Wait = redriveWait
	}
	counts, err := d.Redrive(r.Context(), opts)
	out := redriveResponse(req.DryRun, counts)
	out.More = errors.Is(err, redrive.ErrUntil)
	if out.More {
		err = nil
	}
	end(RedriveOutcome{Matched: out.Matched, Changed: out.Changed, More: out.More, Err: err})
	if !req.DryRun && out.Changed > 0 {
		a.emit("redrive", "", "", 0, int64(out.Changed)) // no id, no target: every stream gets it
	}
	a.log.Info("redrive", "broker", broker, "selector", shorten(sel), "dry_run", req.DryRun, "matched", out.Matched,
		"changed", out.Changed, "more", out.More, "err", err)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("redrive stopped after %d of %d letters were sent back (they stay sent): %v",
			out.Changed, out.Matched, err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// redriveBegun records the redrive that r asks for (sel of broker) in the audit log and
// tells the RedriveHook, and returns the function that settles both with the outcome. The
// entry stays running while the redrive outlasts its lease, and is settled even when the
// client went away (a redrive sent what it sent). An error (the audit log's) refuses the
// redrive: nothing was told.
func (a *api) redriveBegun(r *http.Request, broker, sel string, req httpapi.RedriveRequest) (end func(RedriveOutcome), err error) {
	rec, err := a.BeginAudit(r, "redrive", redriveSelector(broker, req), "", req.DryRun)
	if err != nil {
		return nil, err
	}
	stopHold := rec.Hold(r.Context())
	settle := func(o RedriveOutcome) {
		stopHold()
		_ = rec.End(context.WithoutCancel(r.Context()), int64(o.Matched), int64(o.Changed), o.Err)
	}
	if a.cfg.RedriveHook == nil {
		return settle, nil
	}
	hookEnd := a.cfg.RedriveHook.Begin(r, RedriveOp{Op: "redrive", Broker: broker, Selector: sel, DryRun: req.DryRun})
	return func(o RedriveOutcome) {
		settle(o)
		hookEnd(o)
	}, nil
}

// redriveOptions checks a redrive request against d and returns its options and the
// selector for the audit hook.
func redriveOptions(req httpapi.RedriveRequest, d DeadLetters) (redrive.Options, string, error) {
	opts := redrive.Options{DryRun: req.DryRun}
	switch {
	case (req.Reason == "") == (len(req.IDs) == 0):
		return opts, "", errors.New("give exactly one of reason and ids")
	case req.Reason != "":
		if !reasonCode.MatchString(req.Reason) {
			return opts, "", fmt.Errorf("reason %q: want a reason code such as publish_failed (a-z, 0-9, _; at most 64)", shorten(req.Reason))
		}
		opts.Reasons = []string{req.Reason}
		return opts, "reason=" + req.Reason, nil
	case len(req.IDs) > redriveMaxIDs:
		return opts, "", fmt.Errorf("%d ids: at most %d in one request", len(req.IDs), redriveMaxIDs)
	}
	for _, id := range req.IDs {
		if err := d.CheckID(id); err != nil {
			return opts, "", errors.New(shorten(err.Error()))
		}
	}
	opts.IDs = slices.Compact(slices.Sorted(slices.Values(req.IDs)))
	return opts, "ids=" + strings.Join(opts.IDs, ","), nil
}

// redriveResponse sums counts into the answer.
func redriveResponse(dryRun bool, counts redrive.Counts) httpapi.RedriveResponse {
	out := httpapi.RedriveResponse{DryRun: dryRun, ByReason: make(map[string]httpapi.RedriveTally, len(counts))}
	for reason, t := range counts {
		out.ByReason[reason] = httpapi.RedriveTally{Redriven: t.Redriven, Refused: t.Refused, Other: t.Other, Selected: t.Selected, Left: t.Left}
	}
	out.Matched, out.Changed = counts.Totals()
	return out
}

// redriveSelector is a redrive's selector as the audit log keeps it: the broker and the
// reason or the ids, as the request gave them.
func redriveSelector(broker string, req httpapi.RedriveRequest) json.RawMessage {
	b, _ := json.Marshal(struct {
		Broker string   `json:"broker"`
		Reason string   `json:"reason,omitempty"`
		IDs    []string `json:"ids,omitempty"`
	}{broker, req.Reason, req.IDs})
	return b
}

// deadLetterCall is a redrive's or a purge's request, read: the body, the broker's name
// and dead-letter store, the redrive options and the selector.
type deadLetterCall struct {
	req    httpapi.RedriveRequest
	broker string
	d      DeadLetters
	opts   redrive.Options
	sel    string
}

// deadLetterCall reads the body of a redrive or a purge; it answers a bad one itself
// (400: ok false).
func (a *api) deadLetterCall(w http.ResponseWriter, r *http.Request) (c deadLetterCall, ok bool) {
	if err := decodeBody(r.Body, &c.req); err != nil {
		writeBodyError(w, err)
		return c, false
	}
	var err error
	c.broker, c.d, err = a.deadLetterStore(c.req.Broker)
	if err == nil {
		c.opts, c.sel, err = redriveOptions(c.req, c.d)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": "+err.Error())
		return c, false
	}
	return c, true
}

// redriveSlot takes one of this replica's redriveAtOnce slots of redrives and purges
// (release gives it back), or answers 429 with Retry-After (ok false). It does not block.
func (a *api) redriveSlot(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case a.redrives <- struct{}{}:
		return func() { <-a.redrives }, true
	default:
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("%d redrives or purges are running on this replica: retry later", redriveAtOnce))
		return nil, false
	}
}
