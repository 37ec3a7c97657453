package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// rawCall sends method path with the given headers and body to c's API and returns the
// status and body of the answer.
func rawCall(t *testing.T, c *client.Client, method, path string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCrossOriginChangesRefused: a change (POST, DELETE) that a browser sends from
// another origin is refused with 403 and changes nothing, token or not; the same request
// from the API's own origin, or from a client that sends neither Sec-Fetch-Site nor
// Origin (curl, the CLI), goes through; reads are never refused.
func TestCrossOriginChangesRefused(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			c, st := newAPI(t, token)
			ctx := context.Background()
			if _, err := c.Send(ctx, httpapi.PostRequest{Target: "x.a", Delay: []byte(`"1h"`), ID: "keep", Payload: str("p")}); err != nil {
				t.Fatal(err)
			}
			before, err := c.Get(ctx, "keep")
			if err != nil {
				t.Fatal(err)
			}
			own := c.Base // http://127.0.0.1:<port>
			u, _ := url.Parse(own)
			other := "http://localhost:" + u.Port()
			auth := map[string]string{"Content-Type": "application/json"}
			if token != "" {
				auth["Authorization"] = "Bearer " + token
			}
			with := func(kv ...string) map[string]string {
				h := map[string]string{}
				for k, v := range auth {
					h[k] = v
				}
				for i := 0; i < len(kv); i += 2 {
					h[kv[i]] = kv[i+1]
				}
				return h
			}
			refused := []struct {
				name string
				hdr  map[string]string
			}{
				{"Sec-Fetch-Site cross-site", with("Sec-Fetch-Site", "cross-site")},
				{"Sec-Fetch-Site same-site (another port)", with("Sec-Fetch-Site", "same-site")},
				{"Sec-Fetch-Site cross-site with the own Origin", with("Sec-Fetch-Site", "cross-site", "Origin", own)},
				{"Origin of another host", with("Origin", "http://evil.example")},
				{"Origin of another port", with("Origin", "http://127.0.0.1:1")},
				{"Origin localhost for 127.0.0.1", with("Origin", other)},
				{"Origin null (sandboxed page, file:)", with("Origin", "null")},
				{"text/plain from another site", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}},
			}
			for _, tc := range refused {
				for _, r := range []struct{ method, path, body string }{
					{"POST", "/v1/bulk/cancel", `{"target":"x*"}`},
					{"POST", "/v1/bulk/reschedule", `{"target":"x*","shift":"+8000h"}`},
					{"POST", "/v1/messages", `{"target":"x.b","delay":"1h","id":"forged","payload":"p"}`},
					{"DELETE", "/v1/messages/keep", ""},
					{"POST", "/v1/targets/pause", `{"target":"*"}`},
					{"POST", "/v1/targets/resume", `{"target":"*"}`},
				} {
					code, body := rawCall(t, c, r.method, r.path, tc.hdr, r.body)
					if code != http.StatusForbidden || !strings.Contains(body, `"error":"cross_origin: `) {
						t.Errorf("%s: %s %s = %d %s, want 403 cross_origin", tc.name, r.method, r.path, code, body)
					}
				}
			}
			if m, err := c.Get(ctx, "keep"); err != nil || m.Due != before.Due {
				t.Fatalf("after the forged requests: %+v %v, want due %d unchanged", m, err, before.Due)
			}
			if s, err := st.Stats(ctx); err != nil || s.Parked != 1 {
				t.Fatalf("after the forged requests: parked %+v %v, want 1", s, err)
			}
			if ps, err := st.Pauses(ctx); err != nil || len(ps) != 0 {
				t.Fatalf("after the forged requests: pause set %+v %v, want empty", ps, err)
			}
			// Reads from another origin are not refused (the browser keeps their answers
			// from the page: CORS).
			if code, body := rawCall(t, c, "GET", "/v1/messages/keep", with("Sec-Fetch-Site", "cross-site"), ""); code != http.StatusOK {
				t.Errorf("cross-site GET = %d %s, want 200", code, body)
			}
			allowed := []struct {
				name string
				hdr  map[string]string
			}{
				{"no Sec-Fetch-Site, no Origin (a client that is not a browser)", with()},
				{"Sec-Fetch-Site same-origin (the console)", with("Sec-Fetch-Site", "same-origin", "Origin", own)},
				{"Sec-Fetch-Site none (typed by the user)", with("Sec-Fetch-Site", "none")},
				{"the own Origin without Sec-Fetch-Site", with("Origin", own)},
			}
			for _, tc := range allowed {
				code, body := rawCall(t, c, "POST", "/v1/bulk/reschedule", tc.hdr, `{"target":"x*","shift":"+1m","dry_run":true}`)
				if code != http.StatusOK {
					t.Errorf("%s: dry run = %d %s, want 200", tc.name, code, body)
				}
			}
			if code, body := rawCall(t, c, "DELETE", "/v1/messages/keep", with("Sec-Fetch-Site", "same-origin", "Origin", own), ""); code != http.StatusNoContent {
				t.Fatalf("same-origin DELETE = %d %s, want 204", code, body)
			}
		})
	}
}

// TestPostBodyMustBeJSON: a POST whose Content-Type is not application/json is 415 (a
// browser sends text/plain and form bodies cross-site without asking), and data after
// the JSON value is 400; neither parks or changes anything.
func TestPostBodyMustBeJSON(t *testing.T) {
	c, st := newAPI(t, "")
	ctx := context.Background()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "x.a", Delay: []byte(`"1h"`), ID: "keep", Payload: str("p")}); err != nil {
		t.Fatal(err)
	}
	post := `{"target":"x.b","delay":"1h","id":"new","payload":"p"}`
	bulk := `{"target":"x*"}`
	for _, ct := range []string{"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/jsonx", "application/json-seq", "json", "application/json; charset"} {
		for _, r := range []struct{ path, body string }{{"/v1/messages", post}, {"/v1/bulk/cancel", bulk}} {
			code, body := rawCall(t, c, "POST", r.path, map[string]string{"Content-Type": ct}, r.body)
			if code != http.StatusUnsupportedMediaType || !strings.Contains(body, `"error":"not_json: `) {
				t.Errorf("POST %s Content-Type %q = %d %s, want 415 not_json", r.path, ct, code, body)
			}
		}
	}
	for _, trailing := range []string{`{}`, `x`, `,`, `{"target":"y"}`, `]`, "\x00"} {
		for _, r := range []struct{ path, body string }{{"/v1/messages", post}, {"/v1/bulk/cancel", bulk}} {
			code, body := rawCall(t, c, "POST", r.path, map[string]string{"Content-Type": "application/json"}, r.body+trailing)
			if code != http.StatusBadRequest || !strings.Contains(body, "trailing data after the JSON body") {
				t.Errorf("POST %s with %q after the body = %d %s, want 400 trailing data", r.path, trailing, code, body)
			}
		}
	}
	if s, err := st.Stats(ctx); err != nil || s.Parked != 1 {
		t.Fatalf("refused requests changed the store: %+v %v", s, err)
	}
	if _, err := c.Get(ctx, "keep"); err != nil {
		t.Fatalf("keep: %v", err)
	}
	// Allowed: a charset parameter, any case, whitespace after the value.
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
		body := `{"target":"x.b","delay":"1h","id":"ok` + string(rune('0'+i)) + `","payload":"p"}` + " \n\t"
		if code, b := rawCall(t, c, "POST", "/v1/messages", map[string]string{"Content-Type": ct}, body); code != http.StatusCreated {
			t.Errorf("Content-Type %q = %d %s, want 201", ct, code, b)
		}
	}
	if code, b := rawCall(t, c, "POST", "/v1/bulk/cancel", map[string]string{"Content-Type": "application/json"}, bulk+"\n"); code != http.StatusOK {
		t.Errorf("bulk cancel with a newline after = %d %s, want 200", code, b)
	}
	if _, err := c.Get(ctx, "keep"); err == nil {
		t.Fatal("keep survived the bulk cancel")
	}
}

// TestDotIDsRefused (issue 23 item 9): the ids "." and ".." cannot be addressed in a URL
// path (/v1/messages/. is normalised away by browsers and URL libraries, %2E too), so
// POST /v1/messages refuses them with 400 invalid_id, as ingress dead-letters them;
// ids that merely hold dots are taken and addressable through the client.
func TestDotIDsRefused(t *testing.T) {
	c, st := newAPI(t, "")
	ctx := context.Background()
	for _, id := range []string{".", ".."} {
		_, err := c.Send(ctx, httpapi.PostRequest{Target: "x.a", Delay: []byte(`"1h"`), ID: id, Payload: str("p")})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.HasPrefix(apiErr.Message, "invalid_id") ||
			!strings.Contains(apiErr.Message, "URL path") {
			t.Errorf("id %q: %v, want 400 invalid_id naming the URL path", id, err)
		}
	}
	if s, err := st.Stats(ctx); err != nil || s.Parked != 0 {
		t.Fatalf("refused ids parked: %+v %v", s, err)
	}
	for _, id := range []string{"...", ".a", "a..", "a/..", "%2E"} {
		if _, err := c.Send(ctx, httpapi.PostRequest{Target: "x.a", Delay: []byte(`"1h"`), ID: id, Payload: str("p")}); err != nil {
			t.Fatalf("id %q: %v", id, err)
		}
		if m, err := c.Get(ctx, id); err != nil || m.ID != id {
			t.Errorf("get %q: %+v %v", id, m, err)
		}
		if ok, err := c.Cancel(ctx, id); err != nil || !ok {
			t.Errorf("cancel %q: %v %v", id, ok, err)
		}
	}
}
