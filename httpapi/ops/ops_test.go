package ops

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestOps(t *testing.T) {
	failing := errors.New("connection refused")
	var down atomic.Bool
	h := New([]Check{{Name: "redis", Probe: func(context.Context) error {
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
		h := New(nil, prometheus.NewRegistry())
		if on {
			h = NewWithPprof(nil, prometheus.NewRegistry())
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
