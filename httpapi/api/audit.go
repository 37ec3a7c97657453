package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/httpapi"
)

// The audit log and resumable bulk operations (docs/contract.md section 10;
// docs/design.md, "Audit log" and "Resumable bulk operations"): every change made through
// the API is recorded (GET /v1/audit), and a bulk change is an operation under an op id
// that POST /v1/bulk/resume finishes when it was cut off.

// OpStore is what the audit log and the resumable bulk operations need of the operator's
// side of the store (admin.Admin). Safe for concurrent use; every method blocks until
// Redis answered.
type OpStore interface {
	AuditBegin(ctx context.Context, e admin.AuditEntry) (*admin.AuditRecord, error)
	AuditList(ctx context.Context, after string, limit int) (admin.AuditPage, error)
	StartOp(ctx context.Context, e admin.AuditEntry, spec admin.OpSpec) (*admin.Op, error)
	ResumeOp(ctx context.Context, id string) (*admin.Op, error)
}

// maxActor is the most bytes of X-Delay-Actor kept.
const maxActor = 128

// auditEntry is the audit entry of a change that r asks for: op, its actor (X-Delay-Actor,
// cleaned: at most maxActor bytes, control characters and invalid UTF-8 replaced) and the
// caller's address as this server saw it (a proxy's X-Forwarded-For is not trusted).
func auditEntry(r *http.Request, op string) admin.AuditEntry {
	return admin.AuditEntry{Op: op, Actor: cleanActor(r.Header.Get(httpapi.ActorHeader)), Remote: r.RemoteAddr}
}

// cleanActor keeps an actor printable and bounded.
func cleanActor(v string) string {
	v = strings.TrimSpace(v)
	var b strings.Builder
	for _, c := range v {
		if c == utf8.RuneError || unicode.IsControl(c) {
			c = '?'
		}
		if b.Len()+utf8.RuneLen(c) > maxActor {
			break
		}
		b.WriteRune(c)
	}
	return b.String()
}

// BeginAudit records a change that r asks for (op: "redrive", ...; selector its JSON, or
// id one message) as running, before the change is made: End the record after it. The
// recorder for changes made outside this package's handlers (POST
// /v1/dead-letters/redrive). When the store keeps no audit log it returns nil, nil (End
// of a nil record does nothing); a Redis error must refuse the change (503): an
// unrecorded change is not made.
func (a *api) BeginAudit(r *http.Request, op string, selector json.RawMessage, id string, dryRun bool) (*AuditRecord, error) {
	e := auditEntry(r, op)
	e.Selector, e.ID, e.DryRun = selector, id, dryRun
	return a.beginAudit(r, e)
}

// beginAudit is BeginAudit of the entry e.
func (a *api) beginAudit(r *http.Request, e admin.AuditEntry) (*AuditRecord, error) {
	if a.admin == nil {
		return nil, nil
	}
	rec, err := a.admin.AuditBegin(r.Context(), e)
	if err != nil {
		return nil, err
	}
	return &AuditRecord{rec: rec}, nil
}

// AuditRecord is a change being recorded (BeginAudit).
type AuditRecord struct{ rec *admin.AuditRecord }

// End settles the record: done with the counts, or interrupted when failed is not nil. It
// writes even when ctx is done; a nil record does nothing.
func (r *AuditRecord) End(ctx context.Context, matched, changed int64, failed error) error {
	if r == nil {
		return nil
	}
	return r.rec.End(ctx, matched, changed, failed)
}

// Hold keeps the record running while a change outlasts the entry's lease (a redrive may
// take its 40 s): see admin.AuditRecord.Hold. Call stop before End. A nil record
// holds nothing.
func (r *AuditRecord) Hold(ctx context.Context) (stop func()) {
	if r == nil {
		return func() {}
	}
	return r.rec.Hold(ctx)
}

// OpID is the record's op id ("" for a nil record).
func (r *AuditRecord) OpID() string {
	if r == nil {
		return ""
	}
	return r.rec.OpID()
}

// deleteAudited is DELETE /v1/messages/{id}[?ordering_key=K], recorded as a cancel of
// that id and key. The store names a message by its id within the shard the key picks,
// so a message of that id with another key, or none, that shares the shard is looked
// for first and left alone (404).
func (a *api) deleteAudited(w http.ResponseWriter, r *http.Request) {
	key, ok := orderingKey(w, r)
	if !ok {
		return
	}
	m, err := a.store.GetKey(r.Context(), r.PathValue("id"), key) // its target names the live event
	if err == nil && m.Envelope.OrderingKey != key {
		a.cfg.Metrics.Count("http", "cancel_not_found", 1)
		writeError(w, http.StatusNotFound, notFound(key))
		return
	}
	e := auditEntry(r, "cancel")
	e.ID, e.OrderingKey = r.PathValue("id"), key
	rec, err := a.beginAudit(r, e)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable (audit log): "+err.Error())
		return
	}
	ok, err = a.store.CancelKeyAt(r.Context(), r.PathValue("id"), key, contract.Published("", a.cfg.Now()))
	var busy *delaystore.InDeliveryError
	if errors.As(err, &busy) {
		a.deleteInDelivery(w, r, rec, busy)
		return
	}
	var n int64
	if ok {
		n = 1
	}
	if err := rec.End(r.Context(), n, n, err); err != nil {
		a.log.Warn("audit: end of a cancel", "op_id", rec.OpID(), "err", err)
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	if !ok {
		a.cfg.Metrics.Count("http", "cancel_not_found", 1)
		writeError(w, http.StatusNotFound, notFound(key))
		return
	}
	a.cfg.Metrics.Count("http", "cancelled", 1)
	a.emit("cancel", r.PathValue("id"), m.Envelope.Target, 0, 1)
	w.WriteHeader(http.StatusNoContent)
}

// deleteInDelivery answers a DELETE of a message in delivery: 409 in_delivery, recorded as
// matched and (for a recurring message, whose later firings it stopped) changed.
func (a *api) deleteInDelivery(w http.ResponseWriter, r *http.Request, rec *AuditRecord, busy *delaystore.InDeliveryError) {
	var changed int64
	msg := "in_delivery: the message is being delivered (claimed by a replica, which may hold it until its due time) and can no longer be stopped"
	if busy.Stopped {
		changed = 1
		msg = "in_delivery: a firing of this recurring message is being delivered and may still be published; the later firings are cancelled"
	}
	if err := rec.End(r.Context(), 1, changed, nil); err != nil {
		a.log.Warn("audit: end of a cancel", "op_id", rec.OpID(), "err", err)
	}
	a.cfg.Metrics.Count("http", "cancel_in_delivery", 1)
	writeJSON(w, http.StatusConflict, httpapi.InDeliveryResponse{Error: msg, Stopped: busy.Stopped})
}

// auditList is GET /v1/audit?limit=<n>&cursor=<c>[&actor=<a>][&op=<o>][&state=<s>]: newest
// first, limit 1 to 1000 (default 100), only the entries of that actor (exact), operation
// and state when given (auditFilter).
func (a *api) auditList(w http.ResponseWriter, r *http.Request) {
	if a.admin == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no audit log")
		return
	}
	q := r.URL.Query()
	limit, f, err := auditQuery(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": "+err.Error())
		return
	}
	var after string
	if v := q.Get("cursor"); v != "" {
		id, err := a.admin.Open(r.Context(), admin.CursorAudit, f.query(), v)
		if !cursorOK(w, err) {
			return
		}
		after = id
	}
	entries, next, err := a.auditFiltered(r.Context(), after, limit, f)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	out := httpapi.AuditResponse{Entries: make([]httpapi.AuditEntry, len(entries))}
	for i, e := range entries {
		out.Entries[i] = httpapi.AuditEntry{OpID: e.OpID, At: e.At, Op: e.Op, Selector: e.Selector, ID: e.ID, OrderingKey: e.OrderingKey, DryRun: e.DryRun,
			Matched: e.Matched, Changed: e.Changed, State: e.State, Actor: e.Actor, Remote: e.Remote,
			Shift: e.Shift, DeliverAt: e.DeliverAt, Resumable: e.Resumable}
	}
	if next != "" {
		c := a.admin.Seal(admin.CursorAudit, f.query(), next)
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
}

// auditFilter keeps the audit entries of one actor, operation and state ("": any).
type auditFilter struct{ actor, op, state string }

func (f auditFilter) none() bool { return f == auditFilter{} }

func (f auditFilter) keeps(e admin.AuditEntry) bool {
	return (f.actor == "" || e.Actor == f.actor) && (f.op == "" || e.Op == f.op) && (f.state == "" || e.State == f.state)
}

// query is what a cursor of this filter is sealed with: "" without a filter (the cursors
// of an unfiltered list).
func (f auditFilter) query() string {
	if f.none() {
		return ""
	}
	return strconv.Quote(f.actor) + "\n" + strconv.Quote(f.op) + "\n" + strconv.Quote(f.state)
}

// auditOp is the form of an operation name (cancel, deliver-now, redrive, purge, ...).
var auditOp = regexp.MustCompile(`^[a-z][a-z-]{0,31}$`)

// auditQuery checks GET /v1/audit's parameters, but for the cursor.
func auditQuery(q url.Values) (int, auditFilter, error) {
	var f auditFilter
	for k, v := range q {
		switch k {
		case "limit", "cursor", "actor", "op", "state":
			if len(v) != 1 {
				return 0, f, fmt.Errorf("parameter %q given %d times", k, len(v))
			}
		default:
			return 0, f, fmt.Errorf("unknown parameter %q (limit, cursor, actor, op, state)", shorten(k))
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > admin.MaxAuditPage {
			return 0, f, fmt.Errorf("limit %q: want 1 to %d", shorten(v), admin.MaxAuditPage)
		}
		limit = n
	}
	f = auditFilter{actor: q.Get("actor"), op: q.Get("op"), state: q.Get("state")}
	switch {
	case len(f.actor) > maxActor || f.actor != cleanActor(f.actor):
		return 0, f, fmt.Errorf("actor %q: want at most %d bytes of printable text, as X-Delay-Actor is kept", shorten(f.actor), maxActor)
	case f.op != "" && !auditOp.MatchString(f.op):
		return 0, f, fmt.Errorf("op %q: want an operation such as cancel, reschedule, deliver-now, redrive, purge", shorten(f.op))
	case f.state != "" && f.state != admin.AuditRunning && f.state != admin.AuditDone && f.state != admin.AuditInterrupted:
		return 0, f, fmt.Errorf("state %q: want running, done or interrupted", shorten(f.state))
	}
	return limit, f, nil
}

// auditScan bounds what one filtered page reads: at most this many entries, or this long;
// past either the page ends with what it found and a cursor to go on from.
const (
	auditScanMax    = 20 * admin.MaxAuditPage
	auditScanBudget = 500 * time.Millisecond
)

// auditFiltered reads the entries after after that f keeps, at most limit, newest first,
// and the op id to go on after ("" at the end of the log).
func (a *api) auditFiltered(ctx context.Context, after string, limit int, f auditFilter) ([]admin.AuditEntry, string, error) {
	if f.none() {
		page, err := a.admin.AuditList(ctx, after, limit)
		return page.Entries, page.Next, err
	}
	until := time.Now().Add(auditScanBudget)
	out := []admin.AuditEntry{}
	for read := 0; ; {
		page, err := a.admin.AuditList(ctx, after, admin.MaxAuditPage)
		if err != nil {
			return nil, "", err
		}
		for i, e := range page.Entries {
			if f.keeps(e) {
				out = append(out, e)
			}
			if len(out) == limit {
				if i == len(page.Entries)-1 {
					return out, page.Next, nil
				}
				return out, e.OpID, nil
			}
		}
		read += len(page.Entries)
		if after = page.Next; after == "" || read >= auditScanMax || !time.Now().Before(until) {
			return out, after, nil
		}
	}
}

// bulkSelector is the audit entry's selector of a bulk request: the target pattern and
// the due range as parsed (absent fields left out); nil when it has none (an id alone).
func bulkSelector(req httpapi.BulkRequest, sel admin.Selector) json.RawMessage {
	m := map[string]any{}
	if req.Target != "" {
		m["target"] = req.Target
	}
	if !isAbsent(req.DueFrom) {
		m["due_from"] = sel.DueFrom
	}
	if !isAbsent(req.DueTo) {
		m["due_to"] = max(sel.DueTo, 0)
	}
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}

// bulkOp serves a bulk change as a resumable operation: a new one, or, with a cursor, the
// one the cursor names (sealed for this very request). It answers as bulk does, with the
// op id.
func (a *api) bulkAsOp(w http.ResponseWriter, r *http.Request, req httpapi.BulkRequest, sel admin.Selector, op delaystore.BulkOp, query string) {
	var run *admin.Op
	var err error
	if req.Cursor != "" {
		id, err := a.admin.Open(r.Context(), admin.CursorOp, query, req.Cursor)
		if !cursorOK(w, err) {
			return
		}
		if run, err = a.admin.ResumeOp(r.Context(), id); err != nil {
			a.resumeRefused(w, id, err)
			return
		}
	} else {
		e := auditEntry(r, r.PathValue("op"))
		e.Selector, e.ID, e.OrderingKey, e.DryRun, e.Shift = bulkSelector(req, sel), req.ID, req.OrderingKey, req.DryRun, req.Shift
		if op.Kind == delaystore.BulkDeliverAt {
			e.DeliverAt = &op.At
		}
		spec := admin.OpSpec{Kind: op.Kind, Shift: op.Shift, At: op.At, MaxDelay: op.MaxDelay, Target: req.Target,
			DueFrom: sel.DueFrom, DueTo: sel.DueTo, ID: req.ID, OrderingKey: req.OrderingKey, DryRun: req.DryRun}
		if run, err = a.admin.StartOp(r.Context(), e, spec); err != nil {
			writeError(w, http.StatusServiceUnavailable, "store unavailable (audit log): "+err.Error())
			return
		}
	}
	a.runOp(w, r, run, sel, query)
}

// runOp runs op for the request's budget and answers {"op_id", "matched", "changed",
// "next_cursor"}: what this request did, and the cursor to go on with when the time was
// up; 503 (naming the op id to resume) when Redis failed.
func (a *api) runOp(w http.ResponseWriter, r *http.Request, op *admin.Op, sel admin.Selector, query string) {
	res, err := op.Run(r.Context(), sel, a.cfg.bulkBudget)
	out := httpapi.BulkResponse{OpID: op.ID(), Matched: int(res.Matched), Changed: int(res.Changed)}
	if err != nil {
		a.log.Warn("bulk operation", "op_id", op.ID(), "op", op.Spec.Kind, "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error()+" (operation "+op.ID()+
			": POST /v1/bulk/resume finishes it)")
		return
	}
	if !res.Done {
		c := a.admin.Seal(admin.CursorOp, query, op.ID())
		out.NextCursor = &c
	}
	a.log.Info("bulk operation", "op_id", op.ID(), "op", op.Spec.Kind, "target", op.Spec.Target, "dry_run", op.Spec.DryRun,
		"matched", res.Matched, "changed", res.Changed, "done", res.Done, "actor", cleanActor(r.Header.Get(httpapi.ActorHeader)))
	if !op.Spec.DryRun && res.Changed > 0 {
		a.emit("bulk_"+string(op.Spec.Kind), op.Spec.ID, op.Spec.Target, 0, res.Changed)
	}
	writeJSON(w, http.StatusOK, out)
}

// resumeRefused answers a ResumeOp error.
func (a *api) resumeRefused(w http.ResponseWriter, id string, err error) {
	var busy *admin.ErrOpBusy
	var done *admin.ErrOpDone
	switch {
	case errors.As(err, &done):
		writeJSON(w, http.StatusOK, httpapi.BulkResponse{OpID: id})
	case errors.As(err, &busy):
		w.Header().Set("Retry-After", strconv.Itoa(int((busy.Left+time.Second-1)/time.Second)))
		writeError(w, http.StatusConflict, "op_running: "+err.Error())
	case errors.Is(err, admin.ErrOpUnknown):
		writeError(w, http.StatusNotFound, "unknown_op: no operation "+id+" in the audit log")
	case errors.Is(err, admin.ErrNotResumable):
		writeError(w, http.StatusConflict, "not_resumable: operation "+id+" is no bulk operation")
	case errors.Is(err, admin.ErrBadOpID):
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": op_id: not an op id (32 hex digits)")
	default:
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
	}
}

// resume is POST /v1/bulk/resume {"op_id"}: it finishes a bulk operation that was cut
// off, exactly as it began (its selector, operation and version fence, from its
// progress). Answers as a bulk change (what this request did); an operation already done
// answers 200 with nothing changed; one running elsewhere 409 op_running with
// Retry-After; an unknown op id 404, a malformed one 400.
func (a *api) resume(w http.ResponseWriter, r *http.Request) {
	if a.admin == nil {
		writeError(w, http.StatusNotImplemented, "this store keeps no bulk operations")
		return
	}
	var req httpapi.ResumeRequest
	if err := decodeBody(r.Body, &req); err != nil {
		writeBodyError(w, err)
		return
	}
	op, err := a.admin.ResumeOp(r.Context(), req.OpID)
	if err != nil {
		a.resumeRefused(w, req.OpID, err)
		return
	}
	sp := op.Spec
	var sel admin.Selector
	if sp.Target != "" {
		g, err := selector(sp.Target)
		if err != nil { // it compiled when the operation began: only a changed glob rule gets here
			writeError(w, http.StatusConflict, "not_resumable: "+err.Error())
			return
		}
		sel.Match, sel.Literals = g.MatchTarget, g.Literals()
	}
	// The cursor continues the request that began it: its canonical query again.
	breq := httpapi.BulkRequest{ID: sp.ID, OrderingKey: sp.OrderingKey, Target: sp.Target, DryRun: sp.DryRun}
	query := bulkQuery(opName(sp.Kind), breq, admin.Selector{DueFrom: sp.DueFrom, DueTo: sp.DueTo}, sp.Op())
	a.runOp(w, r, op, sel, query)
}

// opName is the endpoint of a store operation kind.
func opName(kind string) string {
	switch kind {
	case delaystore.BulkCancel:
		return "cancel"
	case delaystore.BulkDeliverNow:
		return "deliver-now"
	}
	return "reschedule"
}
