package httpapi

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress"
)

func newAPI(t *testing.T, token string) (*Client, *delaystore.Store) {
	t.Helper()
	st := storetest.New(t, time.Second)
	return newAPIOn(t, token, st), st
}

// newAPIOn serves the message API over st.
func newAPIOn(t *testing.T, token string, st *delaystore.Store) *Client {
	t.Helper()
	h := NewAPI(APIConfig{
		Rules: ingress.Rules{MaxDelay: 24 * time.Hour, MaxPayload: 64, Targets: ingress.TargetPolicy{
			Brokers: map[string]bool{"nats": true}, Allow: []string{"*"},
			Own: map[string][]string{"nats": {"delay.in", "delay.cancel", "delay.dlq"}},
		}},
		DefaultBroker: "nats",
		Token:         token,
	}, st, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Client{Base: srv.URL, Token: token}
}

func str(s string) *string { return &s }

func TestPostGetDelete(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	before := time.Now()
	resp, err := c.Send(ctx, PostRequest{Target: "orders.timeout", Delay: []byte(`1500`), ID: "o-1",
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
	var apiErr *APIError
	if _, err := c.Get(ctx, "o-1"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("get after cancel: %v", err)
	}
}

func TestPostDeliverAtForms(t *testing.T) {
	c, _ := newAPI(t, "")
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for _, raw := range []string{`"` + at.UTC().Format(time.RFC3339Nano) + `"`, strconv.FormatInt(at.UnixMilli(), 10)} {
		resp, err := c.Send(context.Background(), PostRequest{Target: "a.b", DeliverAt: []byte(raw), Payload: str("x")})
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
		req  PostRequest
		want string
	}{
		{"bad delay", PostRequest{Target: "a.b", Delay: []byte(`"soon"`)}, "invalid_delay"},
		{"float delay", PostRequest{Target: "a.b", Delay: []byte(`1.5`)}, "string or an integer"},
		{"both schedules", PostRequest{Target: "a.b", Delay: []byte(`1`), DeliverAt: []byte(`1`)}, "conflicting_schedule"},
		{"no target", PostRequest{Delay: []byte(`1`)}, "missing_target"},
		{"loop", PostRequest{Target: "delay.in"}, "target_loop"},
		{"kafka off", PostRequest{Target: "kafka:t"}, "broker_not_configured"},
		{"too large", PostRequest{Target: "a.b", Payload: str(strings.Repeat("x", 65))}, "payload_too_large"},
		{"both payloads", PostRequest{Target: "a.b", Payload: str("x"), PayloadBase64: str("eA==")}, "not both"},
		{"bad base64", PostRequest{Target: "a.b", PayloadBase64: str("%%%")}, "payload_base64"},
		{"header smuggles a second delay", PostRequest{Target: "a.b", Delay: []byte(`1`), Headers: map[string]string{"X-Delay": "2"}}, "invalid_delay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Send(context.Background(), tc.req)
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.want) {
				t.Fatalf("err = %v, want 400 containing %q", err, tc.want)
			}
		})
	}
	resp, err := http.Post(c.Base+"/v1/messages", "application/json", strings.NewReader(`{"target":"a.b","nope":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown field: %d", resp.StatusCode)
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
	c.Token = "wrong"
	var apiErr *APIError
	if _, err := c.Stats(context.Background()); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("wrong token: %v", err)
	}
}

func TestOps(t *testing.T) {
	failing := errors.New("connection refused")
	var down atomic.Bool
	h := NewOps([]Check{{Name: "redis", Probe: func(context.Context) error {
		if down.Load() {
			return failing
		}
		return nil
	}}}, prometheus.NewRegistry())
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := new(strings.Builder)
		_, _ = io.Copy(b, resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz %d", code)
	}
	down.Store(true)
	// Once passed, a check fails only after readyFailures probes over readyWindow.
	code, body := get("/readyz")
	for deadline := time.Now().Add(readyWindow + 2*time.Second); code == 200 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		code, body = get("/readyz")
	}
	if code != 503 || !strings.Contains(body, "redis: connection refused") {
		t.Fatalf("/readyz down: %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz must stay 200 while a dependency is down, got %d", code)
	}
	if code, _ := get("/metrics"); code != 200 {
		t.Fatalf("/metrics %d", code)
	}
}

// TestOpsPprof: the profiles are served only when asked for (BRIDGE_PPROF).
func TestOpsPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := NewOps(nil, prometheus.NewRegistry())
		if on {
			h = NewOpsWithPprof(nil, prometheus.NewRegistry())
		}
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if want := map[bool]int{false: 404, true: 200}[on]; rec.Code != want {
				t.Errorf("pprof %v: GET %s = %d, want %d", on, path, rec.Code, want)
			}
		}
	}
}
