package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// bulkBudget is how long one bulk request works before it answers with next_cursor.
const bulkBudget = 10 * time.Second

// bulk serves POST /v1/bulk/{op}: cancel, reschedule, deliver-now (docs/contract.md
// section 8). It answers 400 for a bad request, 503 when Redis failed (with the cursor
// to go on from in the error), else 200 with {"matched", "changed", "next_cursor"}.
func (a *api) bulk(w http.ResponseWriter, r *http.Request) {
	if a.admin == nil {
		writeError(w, http.StatusNotImplemented, "this store does not take bulk changes")
		return
	}
	var req httpapi.BulkRequest
	if err := decodeBody(r.Body, &req); err != nil {
		writeBodyError(w, err)
		return
	}
	sel, op, err := a.bulkRequest(r.PathValue("op"), req)
	if err != nil {
		reason, text := contract.ReasonInvalidRequest, err.Error()
		switch {
		case errors.Is(err, contract.ErrBeyondMaxDelay) || errors.Is(err, contract.ErrTimeOverflow):
			reason = contract.ReasonDelayTooLong
		case errors.Is(err, intake.ErrInvalidOrderingKey):
			reason, text = contract.ReasonInvalidOrderingKey, fieldNames.Replace(text)
		}
		writeError(w, http.StatusBadRequest, reason+": "+text)
		return
	}
	query := bulkQuery(r.PathValue("op"), req, sel, op)
	a.bulkAsOp(w, r, req, sel, op, query)
}

// bulkQuery is the canonical form of a bulk request that its cursors are sealed for: the
// operation and its value, the dry run flag and the selector as parsed (so 1700000000000
// and its RFC 3339 form are the same query), the id and ordering key included; the cursor
// is not part of it.
func bulkQuery(opName string, req httpapi.BulkRequest, sel admin.Selector, op delaystore.BulkOp) string {
	return fmt.Sprintf("%s\n%s\n%d\n%d\n%t\n%q\n%q\n%q\n%d\n%d", opName, op.Kind, op.Shift, op.At, req.DryRun, req.ID, req.OrderingKey, req.Target, sel.DueFrom, sel.DueTo)
}

// cursorOK answers a cursor that did not open (400 invalid_cursor; 503 when Redis failed
// while reading the cursor key) and reports whether err was nil.
func cursorOK(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, admin.ErrBadCursor):
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidCursor+": "+err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
	}
	return false
}

// bulkRequest checks a bulk request and turns it into the store's terms.
func (a *api) bulkRequest(opName string, req httpapi.BulkRequest) (admin.Selector, delaystore.BulkOp, error) {
	var sel admin.Selector
	var err error
	if sel.DueFrom, err = optionalTime("due_from", req.DueFrom); err != nil {
		return sel, delaystore.BulkOp{}, err
	}
	if sel.DueTo, err = optionalTime("due_to", req.DueTo); err != nil {
		return sel, delaystore.BulkOp{}, err
	}
	switch {
	case req.ID == "" && req.Target == "" && isAbsent(req.DueFrom) && isAbsent(req.DueTo):
		return sel, delaystore.BulkOp{}, errors.New("give at least one of id, target, due_from, due_to")
	case req.ID != "" && req.Cursor != "":
		return sel, delaystore.BulkOp{}, errors.New("a request for one id takes no cursor")
	case req.OrderingKey != "" && req.ID == "":
		return sel, delaystore.BulkOp{}, errors.New("ordering_key names the message id with it: give id too")
	case !isAbsent(req.DueTo) && sel.DueTo < sel.DueFrom:
		return sel, delaystore.BulkOp{}, errors.New("due_to is before due_from")
	}
	switch {
	case isAbsent(req.DueTo):
		sel.DueTo = 0 // open: the store reads 0 as no upper bound
	case sel.DueTo == 0:
		sel.DueTo = -1 // an explicit 0 (1970): nothing is due that early
	}
	sel.ID, sel.OrderingKey = req.ID, req.OrderingKey
	if req.OrderingKey != "" {
		var h headers.List
		h.Add(contract.HeaderOrderingKey, req.OrderingKey)
		if _, err := intake.ParseOrderingKey(h, false); err != nil {
			return sel, delaystore.BulkOp{}, fmt.Errorf("ordering_key: %w", err)
		}
	}
	if req.Target != "" {
		g, err := selector(req.Target)
		if err != nil {
			return sel, delaystore.BulkOp{}, err
		}
		sel.Match = g.MatchTarget
		sel.Literals = g.Literals() // lets Redis skip the other targets' entries
	}
	op, err := bulkOp(opName, req, contract.Horizon{Now: a.cfg.Now().UnixMilli(), MaxDelay: a.cfg.Rules.MaxDelay})
	return sel, op, err
}

// bulkOp is the operation of POST /v1/bulk/<name>. A reschedule is bounded by bound
// (contract.Horizon, docs/contract.md section 8): a deliver_at beyond it, or a shift
// longer than its maximum delay either way, is refused; the store bounds each message's
// new due again against the Redis time (BulkOp.MaxDelay).
func bulkOp(name string, req httpapi.BulkRequest, bound contract.Horizon) (delaystore.BulkOp, error) {
	hasShift, hasAt := req.Shift != "", !isAbsent(req.DeliverAt)
	if name != "reschedule" && (hasShift || hasAt) {
		return delaystore.BulkOp{}, fmt.Errorf("%s takes neither shift nor deliver_at", name)
	}
	switch name {
	case "cancel":
		return delaystore.BulkOp{Kind: delaystore.BulkCancel}, nil
	case "deliver-now":
		return delaystore.BulkOp{Kind: delaystore.BulkDeliverNow}, nil
	case "reschedule":
	default:
		return delaystore.BulkOp{}, fmt.Errorf("unknown bulk operation %q (cancel, reschedule, deliver-now)", name)
	}
	switch {
	case hasShift == hasAt:
		return delaystore.BulkOp{}, errors.New("reschedule takes exactly one of shift and deliver_at")
	case hasShift:
		d, err := parseShift(req.Shift, bound)
		return delaystore.BulkOp{Kind: delaystore.BulkShift, Shift: d, MaxDelay: bound.MaxDelay}, err
	}
	at, err := optionalTime("deliver_at", req.DeliverAt)
	if err != nil {
		return delaystore.BulkOp{}, err
	}
	if at, err = bound.At(at); err != nil {
		return delaystore.BulkOp{}, fmt.Errorf("deliver_at %s: %w", rawText(req.DeliverAt), err)
	}
	return delaystore.BulkOp{Kind: delaystore.BulkDeliverAt, At: at, MaxDelay: bound.MaxDelay}, nil
}

// rawText is a JSON value for an error text, shortened.
func rawText(raw json.RawMessage) string {
	const limit = 64
	if len(raw) > limit {
		return string(raw[:limit]) + "..."
	}
	return string(raw)
}

// parseShift reads a signed Go duration ("+1h", "-30m", "90s"), at least a millisecond and
// at most bound's maximum delay either way (a longer one moves every message beyond the
// bound, or into the past); one that overflows a Duration is no Go duration.
func parseShift(s string, bound contract.Horizon) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d.Abs() < time.Millisecond {
		return 0, fmt.Errorf("shift %q: want a signed Go duration of at least 1ms, such as +1h or -30m", s)
	}
	if d.Abs() > bound.MaxDelay {
		return 0, fmt.Errorf("shift %q: %w: the maximum is %s either way", s, contract.ErrBeyondMaxDelay, bound.MaxDelay)
	}
	return d, nil
}

// optionalTime reads a time field: unix ms (integer or string) or RFC 3339; 0 when absent.
func optionalTime(name string, raw json.RawMessage) (int64, error) {
	if isAbsent(raw) {
		return 0, nil
	}
	v, err := stringOrInt(raw)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	ms, err := intake.ParseDeliverAt(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%s %q: want unix ms or RFC 3339", name, v)
	}
	return ms, nil
}

func isAbsent(raw json.RawMessage) bool { return len(raw) == 0 || bytes.Equal(raw, []byte("null")) }
