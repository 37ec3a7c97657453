package bridge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/config"
)

// NewLogger returns the bridge's logger as `bridge run` makes it: JSON (or text with
// BRIDGE_LOG_FORMAT=text) at BRIDGE_LOG_LEVEL, durations written as "200ms"; go-redis's
// own messages are routed into it (routeRedisLog).
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Level(), ReplaceAttr: readableDurations}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	l := slog.New(h)
	routeRedisLog(l)
	return l
}

// readableDurations writes durations as Go durations ("200ms"), not the JSON handler's
// nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// redisLogRepeat is how long an identical go-redis message stays at Debug after it was
// logged at Warn: a pool that cannot dial says the same thing on every attempt.
const redisLogRepeat = time.Minute

// routeRedisLog sends go-redis's own messages (a pool that cannot dial, a connection
// closed under it) through l at Warn, tagged component=go-redis, instead of go-redis's
// default plain-text lines on stderr, so the bridge's output stays one format; the same
// message again within redisLogRepeat goes at Debug. go-redis keeps its logger
// process-wide: the last call wins.
func routeRedisLog(l *slog.Logger) {
	redis.SetLogger(&redisLog{l: l.With("component", "go-redis"), now: time.Now})
}

type redisLog struct {
	l   *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	last string
	at   time.Time
}

func (r *redisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	now := r.now()
	r.mu.Lock()
	repeat := msg == r.last && now.Sub(r.at) < redisLogRepeat
	if !repeat {
		r.last, r.at = msg, now
	}
	r.mu.Unlock()
	if repeat {
		r.l.DebugContext(ctx, msg)
		return
	}
	r.l.WarnContext(ctx, msg)
}
