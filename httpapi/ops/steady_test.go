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
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// The debounce rules, step by step on a manual clock.
func TestSteadyCheck(t *testing.T) {
	var probeErr error
	clock := time.Unix(1000, 0)
	c := newSteadyCheck(Check{Name: "x", Probe: func(context.Context) error { return probeErr }},
		2, 3*time.Second, func() time.Time { return clock })
	down := errors.New("down")
	steps := []struct {
		advance time.Duration
		err     error
		failed  bool
		why     string
	}{
		{0, down, true, "never passed: fails at once"},
		{time.Second, nil, false, "passes"},
		{time.Second, down, false, "one failure after a pass is tolerated"},
		{10 * time.Second, nil, false, "recovery resets the streak"},
		{time.Second, down, false, "a new streak starts"},
		{time.Second, down, false, "two failures within the window are tolerated"},
		{2 * time.Second, down, true, "the third failure, 3s after the first: failing"},
		{time.Second, down, true, "still failing"},
		{time.Second, nil, false, "ready again at the first pass"},
		{time.Second, down, false, "tolerated again"},
		{5 * time.Second, down, true, "two failures spanning more than the window"},
	}
	for i, s := range steps {
		clock = clock.Add(s.advance)
		probeErr = s.err
		failed, pending := c.probe(t.Context())
		if (failed != nil) != s.failed {
			t.Fatalf("step %d (%s): failed = %v", i, s.why, failed)
		}
		if tolerated := s.err != nil && !s.failed; (pending != nil) != tolerated {
			t.Fatalf("step %d (%s): pending = %v", i, s.why, pending)
		}
	}
}

// /readyz against a real Redis: a killed Redis is tolerated for a moment (200, naming it),
// then reported (503 naming redis), and the recovery is reported at once.
func TestReadyzDebounce(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	h := New([]Check{{Name: "redis", Probe: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}},
		prometheus.NewRegistry())
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	get := func() (int, string) {
		resp, err := http.Get(ts.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("/readyz with Redis up = %d %q", code, body)
	}
	srv.Kill()
	killed := time.Now()
	code, body := get()
	if code != http.StatusOK || !strings.Contains(body, "redis:") {
		t.Fatalf("/readyz at the first failure = %d %q, want 200 naming redis as tolerated", code, body)
	}
	for {
		code, body = get()
		if code == http.StatusServiceUnavailable {
			break
		}
		if time.Since(killed) > readyWindow+5*time.Second {
			t.Fatalf("/readyz still %d %q %s after the kill", code, body, time.Since(killed))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("not ready %s after the kill", time.Since(killed).Round(time.Millisecond))
	if time.Since(killed) < readyWindow {
		t.Fatalf("not ready after %s, before the %s window", time.Since(killed), readyWindow)
	}
	if !strings.Contains(body, "redis:") {
		t.Fatalf("503 body does not name redis: %q", body)
	}
	srv.Restart(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _ = get(); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready again after the restart: %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A check's Note is named in /readyz's body without failing it (a full Redis: the sidecar
// stays ready), and also while the check fails.
func TestReadyzNote(t *testing.T) {
	var note atomic.Value
	note.Store("")
	var down atomic.Bool
	h := New([]Check{{Name: "redis", Probe: func(context.Context) error {
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	}, Note: func() string { return note.Load().(string) }}}, prometheus.NewRegistry())
	ts := httptest.NewServer(h)
	defer ts.Close()
	get := func() (int, string) {
		resp, err := http.Get(ts.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz without a note = %d %q", code, body)
	}
	note.Store("full (maxmemory)")
	if code, body := get(); code != 200 || body != "ready\nredis: full (maxmemory)\n" {
		t.Fatalf("/readyz with a note = %d %q, want 200 naming it", code, body)
	}
	down.Store(true)
	code, body := get()
	for deadline := time.Now().Add(readyWindow + 2*time.Second); code == 200 && time.Now().Before(deadline); code, body = get() {
		time.Sleep(100 * time.Millisecond)
	}
	if code != 503 || !strings.Contains(body, "redis: full (maxmemory)") {
		t.Fatalf("/readyz failing with a note = %d %q", code, body)
	}
}
