package bridge

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/config"
)

func TestLogDurationsReadable(t *testing.T) {
	var b strings.Builder
	l := NewLogger(config.Config{LogLevel: "info"}, &b)
	l.Info("retrying", "in", 200*time.Millisecond)
	if !strings.Contains(b.String(), `"in":"200ms"`) {
		t.Fatalf("log line %s", b.String())
	}
}

func TestRedisLogRepeatsAtDebug(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	r := &redisLog{l: slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelWarn})), now: func() time.Time { return now }}
	for range 5 {
		r.Printf(context.Background(), "dial %s: refused", "x")
	}
	now = now.Add(2 * redisLogRepeat)
	r.Printf(context.Background(), "dial %s: refused", "x")
	r.Printf(context.Background(), "another")
	if n := strings.Count(b.String(), "level=WARN"); n != 3 {
		t.Fatalf("%d warnings, want 3 (first, again after a minute, another):\n%s", n, b.String())
	}
}
