package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/glob"
)

// List paging (docs/contract.md section 8): limit's default and most, and how long one
// page reads before it answers with what it found and a cursor.
const (
	listDefault = 100
	listMax     = 1000
	listBudget  = 150 * time.Millisecond
)

// Lister is what GET /v1/messages needs of the operator's side of the store
// (admin.Admin): a page of parked messages.
type Lister interface {
	List(ctx context.Context, q admin.ListQuery, budget time.Duration) ([]admin.Listed, *admin.ListCursor, error)
	// Count is how many messages the selector of q picks, and whether exactly.
	Count(ctx context.Context, q admin.ListQuery, budget time.Duration) (int64, bool, error)
}

// list serves GET /v1/messages: parked messages in scheduled order, filtered by target
// glob and due range, a page of at most limit with next_cursor, and the selector's total
// (admin.Admin.Count: exact or estimated). 400 for a bad parameter
// (an unknown one included), 503 when Redis failed.
func (a *api) list(w http.ResponseWriter, r *http.Request) {
	if a.admin == nil {
		writeError(w, http.StatusNotImplemented, "this store cannot list messages")
		return
	}
	v := r.URL.Query()
	q, err := listQuery(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": "+err.Error())
		return
	}
	// The cursor is sealed for the filters as parsed (a time in ms or RFC 3339 is the same
	// query); limit may change from page to page.
	query := fmt.Sprintf("%q\n%d\n%d", v.Get("target"), q.From, q.To)
	if s := v.Get("cursor"); s != "" {
		raw, err := a.admin.Open(r.Context(), admin.CursorList, query, s)
		if !cursorOK(w, err) {
			return
		}
		c, err := admin.ParseListCursor(raw)
		if !cursorOK(w, err) {
			return
		}
		q.After = &c
	}
	page, next, err := a.admin.List(r.Context(), q, listBudget)
	if err != nil {
		a.log.Warn("list messages", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	total, exact, err := a.admin.Count(r.Context(), q, listBudget)
	if err != nil {
		a.log.Warn("count messages", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable: "+err.Error())
		return
	}
	out := httpapi.ListResponse{Messages: make([]httpapi.ListedMessage, len(page)), Total: total, TotalEstimated: !exact}
	for i, m := range page {
		out.Messages[i] = httpapi.ListedMessage{ID: m.ID, Target: m.Target, Due: m.Due, Scheduled: m.Scheduled,
			Attempts: m.Attempts, Size: m.Size, Source: m.Source, Window: m.Window.Milliseconds(),
			MaxWait: m.MaxWait.Milliseconds(), DueBy: m.DueBy, OrderingKey: m.OrderingKey, HeldBy: m.HeldBy, Every: m.Every}
	}
	if next != nil {
		c := a.admin.Seal(admin.CursorList, query, next.String())
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
}

// listParams are GET /v1/messages' query parameters.
var listParams = map[string]bool{"target": true, "due_from": true, "due_to": true, "limit": true, "cursor": true}

// listQuery checks GET /v1/messages' parameters and turns them into the store's terms,
// but for the cursor (opened by list, for the query).
func listQuery(v url.Values) (admin.ListQuery, error) {
	q := admin.ListQuery{Limit: listDefault}
	for name, vals := range v {
		switch {
		case !listParams[name]:
			return q, fmt.Errorf("unknown parameter %q (target, due_from, due_to, limit, cursor)", name)
		case len(vals) != 1:
			return q, fmt.Errorf("parameter %q given %d times", name, len(vals))
		}
	}
	if pattern := v.Get("target"); pattern != "" {
		g, err := selector(pattern)
		if err != nil {
			return q, err
		}
		q.Match = g.MatchTarget
		q.Literals = g.Literals() // lets Redis skip the other targets' entries
	}
	var err error
	if q.From, err = queryTime(v, "due_from"); err != nil {
		return q, err
	}
	if q.To, err = queryTime(v, "due_to"); err != nil {
		return q, err
	}
	switch {
	case v.Has("due_to") && q.To == 0:
		q.To = -1 // 1970: nothing is due before it (0 means no bound to the store)
	case v.Has("due_to") && q.To < q.From:
		return q, errors.New("due_to is before due_from")
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > listMax {
			return q, fmt.Errorf("limit %q: want 1 to %d", s, listMax)
		}
		q.Limit = n
	}
	return q, nil
}

// selector compiles a target selector once for the whole request (docs/contract.md
// section 8: at most glob.MaxSelectorBytes bytes and glob.MaxSelectorStars "*").
func selector(pattern string) (*glob.Pattern, error) {
	g, err := glob.CompileSelector(pattern)
	switch {
	case errors.Is(err, glob.ErrTooLong):
		return nil, fmt.Errorf("target: %w", err)
	case err != nil:
		return nil, fmt.Errorf("target %q is not a valid glob", pattern)
	}
	return g, nil
}

// queryTime reads an optional time parameter: unix ms or RFC 3339; 0 when absent.
func queryTime(v url.Values, name string) (int64, error) {
	s := strings.TrimSpace(v.Get(name))
	if !v.Has(name) {
		return 0, nil
	}
	ms, err := intake.ParseDeliverAt(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want unix ms or RFC 3339", name, s)
	}
	return ms, nil
}
