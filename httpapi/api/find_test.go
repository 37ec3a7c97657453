package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
)

// TestListTotalAndRecurring: GET /v1/messages answers the selector's total over all its
// pages (the same on every page), exact for a target alone, a due range alone and both
// over a small range; estimated (total_estimated) for a target and a range holding more
// than a page's worth; a recurring message carries its schedule, others none.
func TestListTotalAndRecurring(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	dues := map[string]int64{}
	for i, m := range []struct{ id, target, every string }{{"a1", "a.x", ""}, {"r1", "a.x", "2h"}, {"a3", "a.y", ""}, {"b1", "b.y", ""}} {
		req := httpapi.PostRequest{Target: m.target, ID: m.id, Every: m.every, Payload: str("x")}
		if m.every == "" {
			req.Delay = []byte(`"` + strconv.Itoa(i+1) + `h"`)
		}
		resp, err := c.Send(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		dues[m.id] = resp.Due
	}
	total := func(q url.Values) (int64, bool) {
		t.Helper()
		res, err := c.List(ctx, q)
		if err != nil {
			t.Fatalf("%v: %v", q, err)
		}
		return res.Total, res.TotalEstimated
	}
	ms := func(id string) string { return strconv.FormatInt(dues[id], 10) }
	for _, tc := range []struct {
		q    url.Values
		want int64
	}{
		{url.Values{}, 4},
		{url.Values{"limit": {"1"}}, 4},
		{url.Values{"target": {"a.*"}}, 3},
		{url.Values{"target": {"nats:b.y"}}, 1},
		{url.Values{"target": {"none.*"}}, 0},
		{url.Values{"due_from": {ms("r1")}}, 3},
		{url.Values{"due_to": {"0"}}, 0},
		{url.Values{"target": {"a.*"}, "due_from": {ms("r1")}, "due_to": {ms("a3")}}, 2},
	} {
		if n, est := total(tc.q); n != tc.want || est {
			t.Errorf("%v: total %d (estimated %v), want %d exact", tc.q, n, est, tc.want)
		}
	}
	// The second page of a paging says the same total.
	res, err := c.List(ctx, url.Values{"limit": {"1"}})
	if err != nil || res.NextCursor == nil {
		t.Fatalf("first page: %+v %v", res, err)
	}
	res, err = c.List(ctx, url.Values{"limit": {"1"}, "cursor": {*res.NextCursor}})
	if err != nil || res.Total != 4 {
		t.Fatalf("second page: %+v %v", res, err)
	}
	res, err = c.List(ctx, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Messages {
		if want := map[string]string{"r1": "2h0m0s"}[m.ID]; m.Every != want {
			t.Errorf("%s listed with every %q, want %q", m.ID, m.Every, want)
		}
	}

	// More than a page's worth in the range: a target and a range together are estimated
	// (the range's count times the target's share: here every message is in range).
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < countScanMaxForTest+50; i += 8 {
				if _, err := c.Send(ctx, httpapi.PostRequest{Target: "c.z", Delay: []byte(`"30m"`), Payload: str("x")}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, est := total(url.Values{"target": {"a.*"}, "due_from": {"1"}}); n != 3 || !est {
		t.Fatalf("a.* over a range of %d: total %d (estimated %v), want about 3, estimated", countScanMaxForTest+54, n, est)
	}
	if n, est := total(url.Values{"target": {"c.*"}}); n != countScanMaxForTest+50 || est {
		t.Fatalf("c.* alone: total %d (estimated %v)", n, est)
	}
}

// countScanMaxForTest is admin's countScanMax: the most a count reads before it estimates.
const countScanMaxForTest = 1000

// TestFindByIDForgedInput: the console's search by id is GET /v1/messages/{id}: ids that
// are not there, however forged (path tricks, control and non-UTF-8 bytes, 64 KiB), are a
// JSON 404 or 400, never a 5xx nor another message; the answer carries no CORS header, so a
// page of another site cannot read it.
func TestFindByIDForgedInput(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.x", Delay: []byte(`"1h"`), ID: "real", Payload: str("secret")}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"../real", "real/..", "real%00", "real\x00", "\xff\xfe", "re*", "real ", "REAL",
		"<img src=x onerror=alert(1)>", strings.Repeat("r", 64<<10)} {
		req, _ := http.NewRequest(http.MethodGet, c.Base+"/v1/messages/"+url.PathEscape(id), nil)
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if (resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestURITooLong &&
			resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge) || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("GET id %.40q: %d, CORS %q", id, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	if m, err := c.Get(ctx, "real"); err != nil || m.ID != "real" {
		t.Fatalf("the real one: %+v %v", m, err)
	}
}
