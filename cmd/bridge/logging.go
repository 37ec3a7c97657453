package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

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
