package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
)

// GET /v1/audit filters by actor, operation and state, paging through the matches with
// cursors sealed for the filter; bad filters are 400.
func TestAuditFilter(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := t.Context()
	for i := range 7 {
		c.Actor = []string{"alice", "bob", "alice bob"}[i%3]
		req := httpapi.BulkRequest{Target: fmt.Sprint("f.", i), DryRun: true}
		if i%2 == 1 {
			req.Shift = "+1m"
		}
		if _, err := c.Bulk(ctx, []string{"cancel", "reschedule"}[i%2], req); err != nil {
			t.Fatal(err)
		}
	}
	// all: 0 alice cancel, 1 bob reschedule, 2 "alice bob" cancel, 3 alice reschedule,
	// 4 bob cancel, 5 "alice bob" reschedule, 6 alice cancel (newest first when listed).
	pages := func(q url.Values) ([]string, int) {
		t.Helper()
		var got []string
		n := 0
		for {
			p, err := c.AuditQuery(ctx, q)
			if err != nil {
				t.Fatalf("%v: %v", q, err)
			}
			n++
			for _, e := range p.Entries {
				sel := string(e.Selector)
				got = append(got, e.Actor+"/"+e.Op+"/"+sel[strings.Index(sel, "f.")+2:len(sel)-2])
			}
			if p.NextCursor == nil {
				return got, n
			}
			q.Set("cursor", *p.NextCursor)
		}
	}
	for _, tc := range []struct {
		q    url.Values
		want string
	}{
		{url.Values{"actor": {"alice"}, "limit": {"2"}}, "alice/cancel/6 alice/reschedule/3 alice/cancel/0"},
		{url.Values{"op": {"reschedule"}}, "alice bob/reschedule/5 alice/reschedule/3 bob/reschedule/1"},
		{url.Values{"actor": {"alice bob"}, "op": {"cancel"}, "limit": {"1"}}, "alice bob/cancel/2"},
		{url.Values{"state": {"done"}, "op": {"cancel"}, "actor": {"bob"}}, "bob/cancel/4"},
		{url.Values{"state": {"interrupted"}}, ""},
	} {
		got, _ := pages(tc.q)
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%v: %q, want %q", tc.q, strings.Join(got, " "), tc.want)
		}
	}
	// A cursor is sealed for its filter: another filter (or none) refuses it.
	p, err := c.AuditQuery(ctx, url.Values{"actor": {"alice"}, "limit": {"1"}})
	if err != nil || p.NextCursor == nil {
		t.Fatalf("%+v %v", p, err)
	}
	_, err = c.AuditQuery(ctx, url.Values{"actor": {"bob"}, "cursor": {*p.NextCursor}})
	wantInvalidCursor(t, "a cursor of actor alice with actor bob", err)
	_, err = c.AuditQuery(ctx, url.Values{"cursor": {*p.NextCursor}})
	wantInvalidCursor(t, "a cursor of actor alice without a filter", err)
	for _, q := range []string{"state=gone", "op=DROP", "op=" + strings.Repeat("a", 33), "actor=" + strings.Repeat("a", 129),
		"actor=%0a", "actor=a&actor=b", "who=x"} {
		resp, err := c.HTTP.Get(c.Base + "/v1/audit?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%.40s: %d, want 400", q, resp.StatusCode)
		}
	}
}
