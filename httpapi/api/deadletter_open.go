package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/internal/redrive"
)

// Opening, counting and purging dead letters (docs/contract.md section 10; docs/design.md
// "Dead letters in the API"): how long a count by reason reads before it answers with
// what it saw, and the letters it reads per page.
const (
	deadLetterCountBudget = 3 * time.Second
	deadLetterCountPage   = 1000
)

// deadLetter serves GET /v1/dead-letters/{id}[?broker=]: one letter with its headers and
// payload (as text when it is UTF-8, else base64). 400 for an id of the wrong form, 404
// when there is no letter of that id, 503 when the broker failed; a GET of redrive or
// purge (POST only) is a 405, as any other method of theirs.
func (a *api) deadLetter(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id == "redrive" || id == "purge" {
		deadLetterPathNotAllowed(w, r)
		return
	}
	broker, d, err := a.deadLetterStore(onlyBroker(r))
	if err == nil {
		err = d.CheckID(r.PathValue("id"))
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": "+shorten(err.Error()))
		return
	}
	l, err := d.Get(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, redrive.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found: no dead letter "+shorten(r.PathValue("id")))
		return
	case err != nil:
		a.log.Warn("open a dead letter", "broker", broker, "err", err)
		writeError(w, http.StatusServiceUnavailable, "dead letters unavailable: "+err.Error())
		return
	}
	out := httpapi.DeadLetterDetail{
		DeadLetter:  httpapi.DeadLetter{ID: l.ID, Reason: l.Reason, Error: l.Error, Target: l.Target, At: l.At, Size: l.Size},
		Broker:      broker,
		Headers:     make([]httpapi.Header, len(l.Headers)),
		PayloadSize: len(l.Payload),
	}
	for i, h := range l.Headers {
		out.Headers[i] = httpapi.Header{Key: h.Key, Value: h.Value}
	}
	out.Payload, out.PayloadEncoding = string(l.Payload), "text"
	if !utf8.Valid(l.Payload) {
		out.Payload, out.PayloadEncoding = base64.StdEncoding.EncodeToString(l.Payload), "base64"
	}
	writeJSON(w, http.StatusOK, out)
}

// onlyBroker is the request's broker parameter when it is the only one; a request with
// other parameters gets the broker "?" (refused by deadLetterStore as not configured).
func onlyBroker(r *http.Request) string {
	q := r.URL.Query()
	if len(q) == 0 {
		return ""
	}
	if v, ok := q["broker"]; ok && len(q) == 1 && len(v) == 1 && v[0] != "" {
		return v[0]
	}
	return "?"
}

// deadLetterCounts serves GET /v1/dead-letters/counts[?broker=]: the letters by reason,
// read page by page for at most deadLetterCountBudget ("complete": false when it stopped
// there: the counts are then those of the letters read, the oldest ones).
func (a *api) deadLetterCounts(w http.ResponseWriter, r *http.Request) {
	broker, d, err := a.deadLetterStore(onlyBroker(r))
	if err != nil {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": "+err.Error())
		return
	}
	out := httpapi.DeadLetterCountsResponse{Broker: broker, ByReason: map[string]int{}, Complete: true}
	until := time.Now().Add(deadLetterCountBudget)
	q := redrive.ListQuery{Limit: deadLetterCountPage, Budget: deadLetterCountBudget}
	for {
		page, err := d.List(r.Context(), q)
		if err != nil {
			a.log.Warn("count dead letters", "broker", broker, "err", err)
			writeError(w, http.StatusServiceUnavailable, "dead letters unavailable: "+err.Error())
			return
		}
		for _, l := range page.Letters {
			out.ByReason[l.Reason]++
			out.Total++
		}
		if page.Next == "" {
			break
		}
		if !time.Now().Before(until) {
			out.Complete = false
			break
		}
		q.From, q.Budget = page.Next, time.Until(until)
	}
	writeJSON(w, http.StatusOK, out)
}

// purge serves POST /v1/dead-letters/purge: deletes dead letters by reason or by ids, a
// dry run counting them first. As a redrive: 400 for a bad request, 429 when this
// replica runs redriveAtOnce redrives and purges already, 503 when the audit log or the
// broker failed (letters deleted before stay deleted), else 200 with the counts. 501 on a
// broker whose letters cannot be deleted (Kafka).
func (a *api) purge(w http.ResponseWriter, r *http.Request) {
	c, ok := a.deadLetterCall(w, r)
	if !ok {
		return
	}
	req, broker, d, opts, sel := c.req, c.broker, c.d, c.opts, c.sel
	if err := d.CanPurge(); err != nil {
		writeError(w, http.StatusNotImplemented, "broker "+broker+": "+err.Error())
		return
	}
	release, ok := a.redriveSlot(w)
	if !ok {
		return
	}
	defer release()
	rec, err := a.BeginAudit(r, "purge", redriveSelector(broker, req), "", req.DryRun)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable (audit log): "+err.Error())
		return
	}
	stopHold := rec.Hold(r.Context())
	opts.Until = time.Now().Add(a.cfg.redriveBudget)
	counts, err := d.Purge(r.Context(), opts)
	out := purgeResponse(req.DryRun, counts)
	if out.More = errors.Is(err, redrive.ErrUntil); out.More {
		err = nil
	}
	stopHold()
	if eerr := rec.End(context.WithoutCancel(r.Context()), int64(out.Matched), int64(out.Purged), err); eerr != nil {
		a.log.Warn("audit: end of a purge", "op_id", rec.OpID(), "err", eerr)
	}
	a.log.Info("purge dead letters", "broker", broker, "selector", shorten(sel), "dry_run", req.DryRun,
		"matched", out.Matched, "purged", out.Purged, "more", out.More, "err", err)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("purge stopped after %d of %d letters were deleted (they stay deleted): %v",
			out.Purged, out.Matched, err))
		return
	}
	out.OpID = rec.OpID()
	writeJSON(w, http.StatusOK, out)
}

// purgeResponse sums a purge's counts into the answer.
func purgeResponse(dryRun bool, counts redrive.Counts) httpapi.PurgeResponse {
	out := httpapi.PurgeResponse{DryRun: dryRun, ByReason: make(map[string]httpapi.PurgeTally, len(counts))}
	for reason, t := range counts {
		out.ByReason[reason] = httpapi.PurgeTally{Selected: t.Selected, Purged: t.Purged, Other: t.Other, Left: t.Left}
		out.Matched += t.Selected
		out.Purged += t.Purged
	}
	return out
}

// deadLetterPathNotAllowed answers a method that /v1/dead-letters/{id} (or its redrive
// and purge) does not take.
func deadLetterPathNotAllowed(w http.ResponseWriter, r *http.Request) {
	switch r.PathValue("id") {
	case "redrive", "purge":
		methodNotAllowed("POST")(w, r)
	default:
		methodNotAllowed("GET, HEAD")(w, r)
	}
}
