package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// routeRedisLog sends go-redis's own messages (a pool that cannot dial, a connection
// closed under it) through l at Warn, tagged component=go-redis, instead of go-redis's
// default plain-text lines on stderr, so the bridge's output stays one format. go-redis
// keeps its logger process-wide: the last call wins.
func routeRedisLog(l *slog.Logger) {
	redis.SetLogger(redisLog{l.With("component", "go-redis")})
}

type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, fmt.Sprintf(format, v...))
}
