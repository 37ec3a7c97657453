package bridge

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/config"
)

// NewLogger returns the bridge's logger as `bridge run` makes it: JSON (or text with
// BRIDGE_LOG_FORMAT=text) at BRIDGE_LOG_LEVEL, durations written as "200ms". (Run routes
// go-redis's own messages into the bridge's logger, this one or the host's: routeRedisLog.)
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Level(), ReplaceAttr: readableDurations}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h)
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

// routeRedisLog sends the messages go-redis prints about rdb (a pool that cannot dial, a
// connection closed under it) through l at Warn, tagged component=go-redis, instead of
// go-redis's plain-text lines on stderr, until the returned function is called (after rdb
// is closed); the same message again within redisLogRepeat goes at Debug.
//
// go-redis v9.23 has no per-client logger: its one logger is process-wide
// (redis.SetLogger). So the bridge installs one dispatcher, redisLogs, once per process,
// and each running bridge adds its route: a message that names an address the bridge's
// client dialled (recorded by a dial hook) goes to that bridge's logger; one that names
// no bridge's address (a Cluster node found later, a message without an address) goes to
// every running bridge's; with no bridge running, to stderr as go-redis would print it.
// Several bridges in one process thus each keep their logger. A host that calls
// redis.SetLogger itself after a bridge started replaces the dispatcher.
func routeRedisLog(l *slog.Logger, rdb redis.UniversalClient) (unroute func()) {
	r := &redisRoute{log: &redisLog{l: l.With("component", "go-redis"), now: time.Now}, addrs: map[string]bool{}}
	rdb.AddHook(r)
	redisLogs.add(r)
	return func() { redisLogs.remove(r) }
}

// redisLogs is the process's go-redis logger: the one piece of global state here, because
// go-redis's logger is global (routeRedisLog).
var redisLogs = &redisDispatch{routes: map[*redisRoute]bool{}, fallback: log.New(os.Stderr, "redis: ", log.LstdFlags)}

// redisDispatch sends each go-redis message to the routes of the bridges it concerns.
type redisDispatch struct {
	install  sync.Once
	fallback *log.Logger // no bridge running

	mu     sync.Mutex
	routes map[*redisRoute]bool
}

func (d *redisDispatch) add(r *redisRoute) {
	d.install.Do(func() { redis.SetLogger(d) })
	d.mu.Lock()
	defer d.mu.Unlock()
	d.routes[r] = true
}

func (d *redisDispatch) remove(r *redisRoute) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.routes, r)
}

// Printf implements go-redis's logging interface.
func (d *redisDispatch) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	d.mu.Lock()
	var named, all []*redisRoute
	for r := range d.routes {
		all = append(all, r)
		if r.named(msg) {
			named = append(named, r)
		}
	}
	d.mu.Unlock()
	if len(named) == 0 {
		named = all
	}
	if len(named) == 0 {
		d.fallback.Print(msg)
	}
	for _, r := range named {
		r.log.print(ctx, msg)
	}
}

// redisRoute is one bridge's part of redisDispatch: its logger, and the addresses its
// client dialled. As a go-redis hook it records them.
type redisRoute struct {
	log *redisLog

	mu    sync.Mutex
	addrs map[string]bool
}

// named reports whether msg names an address r's client dialled ("127.0.0.1:6379", not
// as the start of "127.0.0.1:63790").
func (r *redisRoute) named(msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for a := range r.addrs {
		for rest := msg; ; {
			i := strings.Index(rest, a)
			if i < 0 {
				break
			}
			if end := i + len(a); end == len(rest) || rest[end] < '0' || rest[end] > '9' {
				return true
			}
			rest = rest[i+1:]
		}
	}
	return false
}

// DialHook records the address dialled.
func (r *redisRoute) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.mu.Lock()
		r.addrs[addr] = true
		r.mu.Unlock()
		return next(ctx, network, addr)
	}
}

// ProcessHook changes nothing.
func (r *redisRoute) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook changes nothing.
func (r *redisRoute) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type redisLog struct {
	l   *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	last string
	at   time.Time
}

func (r *redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.print(ctx, fmt.Sprintf(format, v...))
}

// print logs msg at Warn, or at Debug when it is the last message again within
// redisLogRepeat.
func (r *redisLog) print(ctx context.Context, msg string) {
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
