package main

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi/ops"
	"github.com/prometheus/client_golang/prometheus"
)

// TestHealthcheck runs `bridge healthcheck` against the real operations handler: exit 0
// while /readyz is 200, 1 with the failing part named while it is 503, and /healthz
// stays 0 (alive) either way.
func TestHealthcheck(t *testing.T) {
	var down atomic.Bool
	checks := []ops.Check{{Name: "redis", Probe: func(context.Context) error {
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	}}}
	srv := httptest.NewServer(ops.New(checks, prometheus.NewRegistry()))
	defer srv.Close()
	env := []string{"BRIDGE_HTTP_ADDR=" + strings.TrimPrefix(srv.URL, "http://")}

	hc := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"healthcheck"}, args...), env, nil, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := hc(); code != 0 {
		t.Fatalf("ready: exit %d, output %q", code, out)
	}
	down.Store(true)
	// /readyz tolerates a check that passed before for a few seconds (no flapping).
	code, out := hc()
	for deadline := time.Now().Add(10 * time.Second); code == 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		code, out = hc()
	}
	if code != 1 || !strings.Contains(out, "redis: connection refused") {
		t.Fatalf("not ready: exit %d, output %q; want 1 naming redis", code, out)
	}
	if code, out := hc("--path", "/healthz"); code != 0 {
		t.Fatalf("/healthz while not ready: exit %d, output %q", code, out)
	}
	if code, _ := hc("extra"); code != 2 {
		t.Fatalf("bad usage: exit %d, want 2", code)
	}
}

func TestLocalAddr(t *testing.T) {
	for in, want := range map[string]string{
		":8080":          "127.0.0.1:8080",
		"0.0.0.0:8080":   "127.0.0.1:8080",
		"[::]:8080":      "127.0.0.1:8080",
		"10.0.0.5:9000":  "10.0.0.5:9000",
		"localhost:8080": "localhost:8080",
	} {
		if got := localAddr(in); got != want {
			t.Errorf("localAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
