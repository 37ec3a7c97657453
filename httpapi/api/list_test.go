package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestListEndpoint: GET /v1/messages by target glob (name and broker:name), due range in
// RFC 3339 and unix ms, pages followed through next_cursor, the fields of each message.
func TestListEndpoint(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	dues := map[string]int64{}
	for i, m := range []struct{ id, target string }{{"a1", "a.x"}, {"a2", "a.x"}, {"a3", "a.y"}, {"b1", "b.y"}, {"b2", "b.z"}} {
		resp, err := c.Send(ctx, httpapi.PostRequest{Target: m.target, Delay: []byte(`"` + strconv.Itoa(i+1) + `h"`), ID: m.id, Payload: str("xyz")})
		if err != nil {
			t.Fatal(err)
		}
		dues[m.id] = resp.Due
	}
	list := func(q url.Values) []string {
		t.Helper()
		var ids []string
		for {
			res, err := c.List(ctx, q)
			if err != nil {
				t.Fatalf("%v: %v", q, err)
			}
			for _, m := range res.Messages {
				ids = append(ids, m.ID)
			}
			if res.NextCursor == nil {
				return ids
			}
			q.Set("cursor", *res.NextCursor)
		}
	}
	if got := strings.Join(list(url.Values{}), ","); got != "a1,a2,a3,b1,b2" {
		t.Fatalf("all: %s", got)
	}
	if got := strings.Join(list(url.Values{"limit": {"2"}}), ","); got != "a1,a2,a3,b1,b2" {
		t.Fatalf("pages of 2: %s", got)
	}
	if got := strings.Join(list(url.Values{"target": {"a.*"}, "limit": {"1"}}), ","); got != "a1,a2,a3" {
		t.Fatalf("a.*: %s", got)
	}
	if got := strings.Join(list(url.Values{"target": {"nats:b.z"}}), ","); got != "b2" {
		t.Fatalf("nats:b.z: %s", got)
	}
	from := time.UnixMilli(dues["a2"]).UTC().Format(time.RFC3339Nano)
	q := url.Values{"due_from": {from}, "due_to": {strconv.FormatInt(dues["b1"], 10)}}
	if got := strings.Join(list(q), ","); got != "a2,a3,b1" {
		t.Fatalf("due range: %s", got)
	}
	if got := list(url.Values{"due_to": {"0"}}); len(got) != 0 {
		t.Fatalf("due_to 0 (1970): %v", got)
	}
	res, err := c.List(ctx, url.Values{"target": {"b.*"}})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("b.y: %+v %v", res, err)
	}
	m := res.Messages[1]
	if m.ID != "b2" || m.Target != "nats:b.z" || m.Due != dues["b2"] || m.Scheduled != m.Due || m.Attempts != 0 ||
		m.Size != 3 || m.Source != "http" {
		t.Fatalf("b2 listed as %+v", m)
	}
}

func TestListRejects(t *testing.T) {
	c, _ := newAPI(t, "")
	for _, tc := range []struct {
		q    url.Values
		want string
	}{
		{url.Values{"target": {"["}}, "not a valid glob"},
		{url.Values{"due_from": {"tomorrow"}}, "due_from"},
		{url.Values{"due_to": {"2026-13-01"}}, "due_to"},
		{url.Values{"due_from": {"2000"}, "due_to": {"1000"}}, "due_to is before due_from"},
		{url.Values{"limit": {"0"}}, "limit"},
		{url.Values{"limit": {"5000"}}, "limit"},
		{url.Values{"limit": {"ten"}}, "limit"},
		{url.Values{"tagret": {"a"}}, "unknown parameter"},
		{url.Values{"limit": {"1", "2"}}, "given 2 times"},
	} {
		_, err := c.List(context.Background(), tc.q)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.want) ||
			!strings.HasPrefix(apiErr.Message, "invalid_request: ") {
			t.Errorf("%v: %v, want 400 invalid_request containing %q", tc.q, err, tc.want)
		}
	}
}

func TestListNeedsTheToken(t *testing.T) {
	c, _ := newAPI(t, "s3cret")
	if _, err := c.List(context.Background(), nil); err != nil {
		t.Fatalf("with token: %v", err)
	}
	c.Token = ""
	var apiErr *client.APIError
	if _, err := c.List(context.Background(), nil); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("without token: %v", err)
	}
}

// TestTargetsEndpoint: GET /v1/targets counts per target, most parked first, with the
// next due; recount=1 is taken, anything else is a 400; the token is needed.
func TestTargetsEndpoint(t *testing.T) {
	c, _ := newAPI(t, "s3cret")
	ctx := context.Background()
	dues := map[string]int64{}
	for i, target := range []string{"a.x", "a.x", "b.y", "a.x", "b.y", "c"} {
		resp, err := c.Send(ctx, httpapi.PostRequest{Target: target, Delay: []byte(`"` + strconv.Itoa(60-i) + `m"`), Payload: str("p")})
		if err != nil {
			t.Fatal(err)
		}
		dues[target] = resp.Due // the last one sent is the earliest
	}
	for _, recount := range []bool{false, true} {
		res, err := c.Targets(ctx, recount)
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			target string
			n      int64
		}{{"nats:a.x", 3}, {"nats:b.y", 2}, {"nats:c", 1}}
		if len(res.Targets) != len(want) {
			t.Fatalf("recount %v: %+v", recount, res)
		}
		for i, w := range want {
			got := res.Targets[i]
			if got.Target != w.target || got.Parked != w.n || got.NextDue == nil || *got.NextDue != dues[strings.TrimPrefix(w.target, "nats:")] {
				t.Fatalf("recount %v: target %d = %+v, want %s %d due %d", recount, i, got, w.target, w.n, dues[strings.TrimPrefix(w.target, "nats:")])
			}
		}
	}
	req, _ := http.NewRequest(http.MethodGet, c.Base+"/v1/targets?limit=3", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := c.HTTP.Do(req)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an unknown parameter: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	c.Token = ""
	var apiErr *client.APIError
	if _, err := c.Targets(ctx, false); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("without token: %v", err)
	}
}

// The console's page answers 401 without the token (its body still the page, which asks
// for it) and 200 with it; its script and style sheet (no data) need no token. All with a
// Content-Security-Policy that allows no other origin and no inline script; /ui redirects
// to /ui/; the data behind them needs the token.
func TestConsoleFilesNeedNoToken(t *testing.T) {
	c, _ := newAPI(t, "s3cret")
	for _, f := range []struct {
		path, token, want string
		status            int
	}{
		{"/ui/", "", "<title>delaybridge console</title>", http.StatusUnauthorized},
		{"/ui/", "wrong", "<title>delaybridge console</title>", http.StatusUnauthorized},
		{"/ui/", "s3cret", "<title>delaybridge console</title>", http.StatusOK},
		{"/ui/index.html", "", "<title>delaybridge console</title>", http.StatusUnauthorized},
		{"/ui/app.js", "", "sessionStorage", http.StatusOK},
		{"/ui/app.css", "", ".chart", http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", c.Base+f.path, nil)
		if f.token != "" {
			req.Header.Set("Authorization", "Bearer "+f.token)
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if resp.StatusCode != f.status || !strings.Contains(string(body), f.want) || !strings.HasPrefix(csp, "default-src 'self'") ||
			strings.Contains(csp, "unsafe-inline") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s (token %q): %d, want %d; CSP %q, body has %q: %v", f.path, f.token, resp.StatusCode, f.status, csp, f.want, strings.Contains(string(body), f.want))
		}
		if f.status == http.StatusUnauthorized && (resp.Header.Get("WWW-Authenticate") == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html")) {
			t.Errorf("GET %s without the token: WWW-Authenticate %q, Content-Type %q", f.path, resp.Header.Get("WWW-Authenticate"), resp.Header.Get("Content-Type"))
		}
	}
	noRedirect := checked(t, &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }})
	if resp, err := noRedirect.Get(c.Base + "/ui"); err != nil || resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %v %v", resp, err)
	}
	for _, path := range []string{"/v1/overview", "/v1/forecast?step=60000&buckets=60", "/v1/targets", "/v1/messages"} {
		resp, err := c.HTTP.Get(c.Base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, resp.StatusCode)
		}
	}
}

// TestForecastAndOverview: the forecast counts by scheduled time in buckets from now, with
// the overdue ones apart; bad parameters are a 400; the overview answers without metrics.
func TestForecastAndOverview(t *testing.T) {
	c, _ := newAPI(t, "")
	for i, d := range []string{"90s", "150s", "170s", "10m"} {
		if _, err := c.Send(context.Background(), httpapi.PostRequest{Target: "a", Delay: []byte(`"` + d + `"`), Payload: str(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string, out any) int {
		resp, err := c.HTTP.Get(c.Base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			_ = json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	var fc httpapi.ForecastResponse
	if code := get("/v1/forecast?step=60000&buckets=5", &fc); code != 200 || fc.Overdue != 0 || len(fc.Counts) != 5 ||
		fc.Counts[1] != 1 || fc.Counts[2] != 2 || fc.Counts[0]+fc.Counts[3]+fc.Counts[4] != 0 {
		t.Fatalf("forecast: %d %+v", code, fc)
	}
	for _, q := range []string{"step=60000", "step=10&buckets=5", "step=60000&buckets=0", "step=60000&buckets=401", "step=60000&buckets=5&x=1"} {
		if code := get("/v1/forecast?"+q, nil); code != http.StatusBadRequest {
			t.Errorf("forecast?%s: %d, want 400", q, code)
		}
	}
	var ov httpapi.OverviewResponse
	if code := get("/v1/overview", &ov); code != 200 || ov.Redis != "ok" || ov.LatenessP50 != nil {
		t.Fatalf("overview: %d %+v", code, ov)
	}
}
