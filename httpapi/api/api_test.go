package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

func newAPI(t *testing.T, token string) (*client.Client, *delaystore.Store) {
	t.Helper()
	st := storetest.New(t, time.Second)
	return newAPIOn(t, token, st), st
}

// newAPIOn serves the message API over st.
func newAPIOn(t testing.TB, token string, st *delaystore.Store) *client.Client {
	t.Helper()
	h := New(Config{
		Rules: intake.Rules{MaxDelay: 24 * time.Hour, MaxPayload: 64, Targets: intake.TargetPolicy{
			Brokers: map[string]bool{"nats": true}, Allow: []string{"*"},
			Own: map[string][]string{"nats": {"delay.in", "delay.cancel", "delay.dlq"}},
		}},
		DefaultBroker: "nats",
		Token:         token,
	}, st, adminOf(t, st), nil)
	srv := serveAPI(t, h)
	return &client.Client{Base: srv.URL, Token: token, HTTP: srv.Client}
}

// adminOf is the initialised operator's side of st.
func adminOf(t testing.TB, st *delaystore.Store) *admin.Admin {
	t.Helper()
	a := admin.New(st)
	if err := a.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return a
}

func str(s string) *string { return &s }

func TestPostGetDelete(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	before := time.Now()
	resp, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`1500`), ID: "o-1",
		Headers: map[string]string{"tenant": "acme"}, PayloadBase64: str(base64.StdEncoding.EncodeToString([]byte{0, 1, 2}))})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ID != "o-1" {
		t.Fatalf("id %q", resp.ID)
	}
	if d := time.UnixMilli(resp.Due).Sub(before); d < 1400*time.Millisecond || d > 2500*time.Millisecond {
		t.Fatalf("due %s from now, want ~1.5s", d)
	}
	m, err := c.Get(ctx, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Target != "nats:orders.timeout" || m.Source != "http" || m.Headers["tenant"] != "acme" || m.PayloadBase64 != "AAEC" || m.Due != resp.Due {
		t.Fatalf("get = %+v", m)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Parked != 1 || st.NextDue == nil || len(st.PerShard) != 4 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
	ok, err := c.Cancel(ctx, "o-1")
	if err != nil || !ok {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	ok, err = c.Cancel(ctx, "o-1")
	if err != nil || ok {
		t.Fatalf("second cancel = %v, %v; want false (404)", ok, err)
	}
	var apiErr *client.APIError
	if _, err := c.Get(ctx, "o-1"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("get after cancel: %v", err)
	}
}

// TestPostExpires: expires (string or integer ms) is kept with the message and shown by
// GET in milliseconds; a message without it shows none.
func TestPostExpires(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	for raw, want := range map[string]int64{`"5m"`: 300000, `1500`: 1500, `"PT1H"`: 3600000} {
		if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", Delay: []byte(`"1h"`), Expires: []byte(raw), ID: "e", Payload: str("x")}); err != nil {
			t.Fatalf("expires %s: %v", raw, err)
		}
		m, err := c.Get(ctx, "e")
		if err != nil || m.Expires == nil || *m.Expires != want {
			t.Fatalf("expires %s: get = %+v, %v; want expires %d", raw, m, err, want)
		}
		if _, ok := m.Headers["x-delay-expires"]; ok {
			t.Fatalf("expires %s shown as a header too: %v", raw, m.Headers)
		}
	}
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", Delay: []byte(`"1h"`), ID: "e", Payload: str("x")}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Get(ctx, "e"); err != nil || m.Expires != nil {
		t.Fatalf("without expires: get = %+v, %v", m, err)
	}
}

// TestPostWindow: window (string or integer ms) is kept with the message and shown by GET
// in milliseconds, and the due time answered (and shown) is the one drawn in
// [due, due + window].
func TestPostWindow(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	at := time.Now().Add(time.Hour).UnixMilli()
	for raw, want := range map[string]int64{`"10s"`: 10000, `1500`: 1500, `"PT1H"`: 3600000} {
		resp, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", DeliverAt: []byte(strconv.FormatInt(at, 10)), Window: []byte(raw), ID: "w", Payload: str("x")})
		if err != nil {
			t.Fatalf("window %s: %v", raw, err)
		}
		if resp.Due < at || resp.Due > at+want {
			t.Fatalf("window %s: due %d, outside [%d, %d]", raw, resp.Due, at, at+want)
		}
		m, err := c.Get(ctx, "w")
		if err != nil || m.Window == nil || *m.Window != want || m.Due != resp.Due {
			t.Fatalf("window %s: get = %+v, %v; want window %d, due %d", raw, m, err, want, resp.Due)
		}
		if _, ok := m.Headers["x-delay-window"]; ok {
			t.Fatalf("window %s shown as a header too: %v", raw, m.Headers)
		}
	}
}

// TestPostEvery: every is kept with the message and shown by GET; without delay or
// deliver_at the first firing is the schedule's first occurrence.
func TestPostEvery(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	before := time.Now()
	resp, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", Every: "CRON_TZ=Europe/Berlin 0 9 * * *", ID: "daily", Payload: str("x")})
	if err != nil {
		t.Fatal(err)
	}
	due := time.UnixMilli(resp.Due).In(time.FixedZone("", 0))
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if local := due.In(berlin); local.Hour() != 9 || local.Minute() != 0 || due.Before(before) || due.After(before.Add(25*time.Hour)) {
		t.Fatalf("first firing %s (%s in Berlin), want the next 09:00 Berlin", due, local)
	}
	m, err := c.Get(ctx, "daily")
	if err != nil || m.Every != "CRON_TZ=Europe/Berlin 0 9 * * *" || m.Expires != nil {
		t.Fatalf("get = %+v, %v", m, err)
	}
	if _, ok := m.Headers["x-delay-every"]; ok {
		t.Fatalf("every shown as a header too: %v", m.Headers)
	}
}

// TestPostMisfire: misfire is x-delay-misfire; GET shows a recurring message's policy,
// once when none was given; a bad one is a 400 that names the field.
func TestPostMisfire(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	for id, give := range map[string]string{"m-skip": "skip", "m-all": "all", "m-default": ""} {
		if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", Every: "1s", Misfire: give, ID: id, DeliverAt: json.RawMessage("0"), Payload: str("x")}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		m, err := c.Get(ctx, id)
		if want := cmp.Or(give, "once"); err != nil || m.Misfire != want {
			t.Fatalf("get %s = %+v, %v; want misfire %q", id, m, err, want)
		}
	}
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", Every: "1s", Misfire: "never", Payload: str("x")}); err == nil ||
		!strings.Contains(err.Error(), "invalid_every") || !strings.Contains(err.Error(), "misfire") {
		t.Fatalf("bad misfire: %v", err)
	}
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", Misfire: "skip", Payload: str("x")}); err == nil {
		t.Fatal("misfire without every accepted")
	}
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "a.b", ID: "once-only", Payload: str("x")}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Get(ctx, "once-only"); err != nil || m.Misfire != "" {
		t.Fatalf("a one-shot message shows misfire %q, %v", m.Misfire, err)
	}
}

func TestPostDeliverAtForms(t *testing.T) {
	c, _ := newAPI(t, "")
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for _, raw := range []string{`"` + at.UTC().Format(time.RFC3339Nano) + `"`, strconv.FormatInt(at.UnixMilli(), 10)} {
		resp, err := c.Send(context.Background(), httpapi.PostRequest{Target: "a.b", DeliverAt: []byte(raw), Payload: str("x")})
		if err != nil {
			t.Fatalf("deliver_at %s: %v", raw, err)
		}
		if resp.Due != at.UnixMilli() {
			t.Fatalf("deliver_at %s: due %d, want %d", raw, resp.Due, at.UnixMilli())
		}
	}
}

func TestPostRejects(t *testing.T) {
	c, st := newAPI(t, "")
	cases := []struct {
		name string
		req  httpapi.PostRequest
		want string
	}{
		{"bad delay", httpapi.PostRequest{Target: "a.b", Delay: []byte(`"soon"`)}, "invalid_delay"},
		{"float delay", httpapi.PostRequest{Target: "a.b", Delay: []byte(`1.5`)}, "string or an integer"},
		{"both schedules", httpapi.PostRequest{Target: "a.b", Delay: []byte(`1`), DeliverAt: []byte(`1`)}, "conflicting_schedule"},
		{"no target", httpapi.PostRequest{Delay: []byte(`1`)}, "missing_target: missing target: no target header"},
		{"both schedules, in the API's names", httpapi.PostRequest{Target: "a.b", Delay: []byte(`1`), DeliverAt: []byte(`1`)}, "both delay and deliver_at given"},
		{"loop", httpapi.PostRequest{Target: "delay.in"}, "target_loop"},
		{"kafka off", httpapi.PostRequest{Target: "kafka:t"}, "broker_not_configured"},
		{"too large", httpapi.PostRequest{Target: "a.b", Payload: str(strings.Repeat("x", 65))}, "payload_too_large"},
		{"both payloads", httpapi.PostRequest{Target: "a.b", Payload: str("x"), PayloadBase64: str("eA==")}, "invalid_request: give payload or payload_base64, not both"},
		{"bad base64", httpapi.PostRequest{Target: "a.b", PayloadBase64: str("%%%")}, "payload_base64"},
		{"bad every", httpapi.PostRequest{Target: "a.b", Every: "sometimes"}, `invalid_every: invalid every "sometimes": want a Go duration`},
		{"bad expires", httpapi.PostRequest{Target: "a.b", Expires: []byte(`"0s"`)}, "invalid_expires"},
		{"window beyond an hour", httpapi.PostRequest{Target: "a.b", Window: []byte(`"2h"`)}, "invalid_window: invalid window: window"},
		{"header smuggles a second window", httpapi.PostRequest{Target: "a.b", Window: []byte(`1000`), Headers: map[string]string{"X-Delay-Window": "2s"}}, "invalid_window"},
		{"header smuggles a second expires", httpapi.PostRequest{Target: "a.b", Expires: []byte(`1000`), Headers: map[string]string{"X-Delay-Expires": "2s"}}, "invalid_expires"},
		{"header smuggles a second delay", httpapi.PostRequest{Target: "a.b", Delay: []byte(`1`), Headers: map[string]string{"X-Delay": "2"}}, "invalid_delay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Send(context.Background(), tc.req)
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.want) {
				t.Fatalf("err = %v, want 400 containing %q", err, tc.want)
			}
		})
	}
	resp, err := c.HTTP.Post(c.Base+"/v1/messages", "application/json", strings.NewReader(`{"target":"a.b","nope":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"error":"invalid_request: invalid JSON body`) {
		t.Fatalf("unknown field: %d %s", resp.StatusCode, body)
	}
	s, err := st.Stats(context.Background())
	if err != nil || s.Parked != 0 {
		t.Fatalf("rejected requests parked something: %+v %v", s, err)
	}
}

func TestToken(t *testing.T) {
	c, _ := newAPI(t, "s3cret")
	if _, err := c.Stats(context.Background()); err != nil {
		t.Fatalf("with token: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, c.Base+"/v1/stats", nil)
	req.Header.Set("Authorization", "bearer s3cret") // the scheme is case-insensitive
	if resp, err := c.HTTP.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("lower-case scheme: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	c.Token = "wrong"
	var apiErr *client.APIError
	if _, err := c.Stats(context.Background()); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("wrong token: %v", err)
	}
}

// TestJSONErrorsForOtherMethodsAndPaths: a wrong method or path is answered in JSON like
// every other error, a wrong method with Allow.
func TestJSONErrorsForOtherMethodsAndPaths(t *testing.T) {
	c, _ := newAPI(t, "")
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodPut, "/v1/messages", http.StatusMethodNotAllowed, "GET, HEAD, POST"},
		{http.MethodPut, "/v1/messages/x", http.StatusMethodNotAllowed, "GET, HEAD, DELETE"},
		{http.MethodPost, "/v1/stats", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, "/v2/nothing", http.StatusNotFound, ""},
	} {
		req, _ := http.NewRequest(tc.method, c.Base+tc.path, nil)
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" ||
			!strings.HasPrefix(string(body), `{"error":`) || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d %q Allow %q: %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"), body)
		}
	}
}
