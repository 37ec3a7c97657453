package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

// newAPIBudget serves the message API over a new store with a bulk budget of 0: every
// bulk request does one chunk and hands out a cursor.
func newAPIBudget(t *testing.T) *client.Client {
	t.Helper()
	st := storetest.New(t, time.Second)
	h := New(Config{
		Rules: intake.Rules{MaxDelay: 24 * time.Hour, MaxPayload: 64, Targets: intake.TargetPolicy{
			Brokers: map[string]bool{"nats": true}, Allow: []string{"*"},
		}},
		DefaultBroker: "nats",
		bulkBudget:    time.Nanosecond,
	}, st, adminOf(t, st), nil)
	srv := serveAPI(t, h)
	return &client.Client{Base: srv.URL, HTTP: srv.Client}
}

// wantInvalidCursor fails unless err is the API's 400 invalid_cursor.
func wantInvalidCursor(t *testing.T, what string, err error) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.HasPrefix(apiErr.Message, "invalid_cursor: ") {
		t.Errorf("%s: %v, want 400 invalid_cursor", what, err)
	}
}

// TestForgedCursorsRefused is issue 23 item 7: the forged bulk cursor
// base64url("0\nz\n\n\n9000000000000000000") with a +1h shift moved messages many times; now
// it, any altered or made-up cursor, and a real cursor sent with another selector, another
// operation or value, or to the other endpoint are refused with 400 invalid_cursor, and
// nothing moves. The cursors the API hands out still page through to the end, each
// message shifted exactly once.
func TestForgedCursorsRefused(t *testing.T) {
	c := newAPIBudget(t)
	ctx := context.Background()
	dues := map[string]int64{}
	for i := range 1200 {
		id := fmt.Sprintf("m-%04d", i)
		res, err := c.Send(ctx, httpapi.PostRequest{Target: "tgt.fc2.x", Delay: []byte(`"1h"`), ID: id, Payload: str("p")})
		if err != nil {
			t.Fatal(err)
		}
		dues[id] = res.Due
	}
	unchanged := func(what string) {
		t.Helper()
		for id, due := range dues {
			if m, err := c.Get(ctx, id); err != nil || m.Due != due {
				t.Fatalf("%s: %s due %d, %v; want %d", what, id, m.Due, err, due)
			}
		}
	}
	shift := httpapi.BulkRequest{Target: "tgt.fc2.*", Shift: "+1h"}
	forged := base64.RawURLEncoding.EncodeToString([]byte("0\nz\n\n\n9000000000000000000"))
	for _, cur := range []string{forged, forged + ".AAAA", "nonsense", base64.RawURLEncoding.EncodeToString([]byte("l1\n0\n"))} {
		req := shift
		req.Cursor = cur
		_, err := c.Bulk(ctx, "reschedule", req)
		wantInvalidCursor(t, "bulk with "+cur, err)
		_, err = c.List(ctx, url.Values{"target": {"tgt.fc2.*"}, "cursor": {cur}})
		wantInvalidCursor(t, "list with "+cur, err)
	}
	unchanged("after the forged cursors")

	// Real cursors, of a dry run and of a list, sent with something else.
	dry := shift
	dry.DryRun = true
	res, err := c.Bulk(ctx, "reschedule", dry)
	if err != nil || res.NextCursor == nil {
		t.Fatalf("dry run with no budget: %+v %v, want a cursor", res, err)
	}
	page, err := c.List(ctx, url.Values{"target": {"tgt.fc2.*"}, "limit": {"1"}})
	if err != nil || page.NextCursor == nil {
		t.Fatalf("list page: %+v %v, want a cursor", page, err)
	}
	bulkCur, listCur := *res.NextCursor, *page.NextCursor
	for name, req := range map[string]httpapi.BulkRequest{
		"the dry run's cursor on the real change": {Target: "tgt.fc2.*", Shift: "+1h", Cursor: bulkCur},
		"another shift":     {Target: "tgt.fc2.*", Shift: "+2h", DryRun: true, Cursor: bulkCur},
		"another selector":  {Target: "tgt.*", Shift: "+1h", DryRun: true, Cursor: bulkCur},
		"a due range added": {Target: "tgt.fc2.*", Shift: "+1h", DryRun: true, DueFrom: []byte("1"), Cursor: bulkCur},
		"a list cursor":     {Target: "tgt.fc2.*", Shift: "+1h", DryRun: true, Cursor: listCur},
	} {
		_, err := c.Bulk(ctx, "reschedule", req)
		wantInvalidCursor(t, name, err)
	}
	_, err = c.Bulk(ctx, "cancel", httpapi.BulkRequest{Target: "tgt.fc2.*", Cursor: bulkCur})
	wantInvalidCursor(t, "a reschedule's cursor on a cancel", err)
	for name, q := range map[string]url.Values{
		"another selector": {"target": {"tgt.*"}, "cursor": {listCur}},
		"no selector":      {"cursor": {listCur}},
		"a due range":      {"target": {"tgt.fc2.*"}, "due_to": {"9999999999999"}, "cursor": {listCur}},
		"a bulk cursor":    {"target": {"tgt.fc2.*"}, "cursor": {bulkCur}},
	} {
		_, err := c.List(ctx, q)
		wantInvalidCursor(t, "list, "+name, err)
	}
	// The same query with the cursor goes on (limit may change; a due time in RFC 3339 is
	// the same query as in ms).
	if _, err := c.List(ctx, url.Values{"target": {"tgt.fc2.*"}, "limit": {"5"}, "cursor": {listCur}}); err != nil {
		t.Fatalf("list with its own cursor: %v", err)
	}
	ms := url.Values{"due_from": {"1000"}, "limit": {"1"}}
	p1, err := c.List(ctx, ms)
	if err != nil || p1.NextCursor == nil {
		t.Fatalf("%+v %v", p1, err)
	}
	if _, err := c.List(ctx, url.Values{"due_from": {"1970-01-01T00:00:01Z"}, "cursor": {*p1.NextCursor}}); err != nil {
		t.Fatalf("the same due_from in RFC 3339: %v", err)
	}
	unchanged("after the misused cursors")

	// The real change, followed through its cursors: every message shifted once.
	total, calls := 0, 0
	req := shift
	for {
		res, err := c.Bulk(ctx, "reschedule", req)
		if err != nil || calls > 100 {
			t.Fatalf("call %d: %+v %v", calls, res, err)
		}
		calls++
		total += res.Changed
		if res.NextCursor == nil {
			break
		}
		req.Cursor = *res.NextCursor
	}
	if total != len(dues) || calls < 2 {
		t.Fatalf("changed %d in %d calls, want %d in several", total, calls, len(dues))
	}
	for id, due := range dues {
		if m, err := c.Get(ctx, id); err != nil || m.Due != due+3_600_000 {
			t.Fatalf("%s due %d, %v; want %d (shifted once)", id, m.Due, err, due+3_600_000)
		}
	}
}
