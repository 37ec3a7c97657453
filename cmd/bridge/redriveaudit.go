package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/connect"
	"github.com/delaybridge/delaybridge/internal/redrive"
)

// The audit log of `bridge redrive` (docs/contract.md section 10): the
// command has no API in between, so it writes its entry to the delay store's Redis
// itself, as POST /v1/dead-letters/redrive does through the API.
const (
	// cliRemote is the remote of an entry that a command wrote on its host, not through
	// the API (admin.AuditEntry.Remote).
	cliRemote = "cli"
	// redriveAuditTimeout bounds the wait for Redis to begin the entry.
	redriveAuditTimeout = 5 * time.Second
)

// errNoRedisNamed: a command that records in the audit log was given no Redis. It never
// falls back to the default URL (127.0.0.1:6379 may be another application's Redis, and
// the dev bridge's Redis is in memory, at the URL its banner prints).
var errNoRedisNamed = errors.New("no Redis named for the audit log: set BRIDGE_REDIS_URL (or BRIDGE_REDIS_CLUSTER_ADDRS / BRIDGE_REDIS_SENTINEL_ADDRS) to the bridge's Redis; `bridge dev` prints its in-memory Redis' URL in its banner")

// redriveSelector is what a run selects, as its audit entry keeps it: the broker, and
// the reasons (none: all), --max and --from-start when given.
func redriveSelector(broker string, opts redrive.Options, fromStart bool) json.RawMessage {
	b, _ := json.Marshal(struct {
		Broker    string   `json:"broker"`
		Reasons   []string `json:"reasons,omitempty"`
		Max       int      `json:"max,omitempty"`
		FromStart bool     `json:"from_start,omitempty"`
	}{broker, opts.Reasons, opts.Max, fromStart})
	return b
}

// beginRedriveAudit records the run about to start in the audit log of the configured
// Redis, as running (actor: the OS user; remote: "cli"), and returns the function that
// settles it with the run's counts, done or, when the run failed, interrupted (also when
// ctx was cancelled), and closes the Redis client. The entry stays running while the run
// lasts (its lease renewed). Policy: a real run whose entry cannot be begun within
// redriveAuditTimeout is refused (the error says so: nothing was changed); a dry run, which
// changes nothing, goes on after a one-line warning on stderr.
func beginRedriveAudit(ctx context.Context, cfg config.Config, environ []string, sel json.RawMessage, dryRun bool, stderr io.Writer) (end func(redrive.Counts, error), err error) {
	noop := func(redrive.Counts, error) {}
	rec, closeRedis, err := auditBegin(ctx, cfg, admin.AuditEntry{Op: "redrive", Selector: sel, DryRun: dryRun, Actor: osUser(environ), Remote: cliRemote}, stderr)
	switch {
	case err != nil && dryRun:
		fmt.Fprintf(stderr, "warning: this dry run is not recorded in the audit log: %s\n", oneLine(err.Error()))
		return noop, nil
	case err != nil:
		return nil, fmt.Errorf("redrive not run: its audit log entry cannot be written (Redis of BRIDGE_REDIS_URL, or the BRIDGE_REDIS_* topology, as for the bridge): %w; --no-audit runs it unrecorded", err)
	}
	stop := rec.Hold(ctx)
	return func(counts redrive.Counts, failed error) {
		stop()
		matched, changed := counts.Totals()
		if err := rec.End(context.WithoutCancel(ctx), int64(matched), int64(changed), failed); err != nil {
			fmt.Fprintf(stderr, "warning: audit log entry %s not settled (it shows interrupted): %s\n", rec.OpID(), oneLine(err.Error()))
		}
		closeRedis()
	}, nil
}

// auditBegin opens the configured Redis and begins e in its audit log, waiting at most
// redriveAuditTimeout. closeRedis closes the client (nil on error: then it is closed).
func auditBegin(ctx context.Context, cfg config.Config, e admin.AuditEntry, stderr io.Writer) (rec *admin.AuditRecord, closeRedis func(), err error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// go-redis logs each failed dial of its pool (its logger is the process's): the error
	// returned says the same once. This process runs one command.
	redis.SetLogger(quietRedis{})
	rdb, err := connect.RedisClient(cfg.Redis.Connect(), logger)
	if err != nil {
		return nil, nil, fmt.Errorf("redis: %w", err)
	}
	store, err := delaystore.New(rdb, cfg.StoreConfig())
	if err == nil {
		bctx, cancel := context.WithTimeout(ctx, redriveAuditTimeout)
		rec, err = admin.New(store, admin.WithAudit(cfg.Audit)).AuditBegin(bctx, e)
		cancel()
	}
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return rec, func() { _ = rdb.Close() }, nil
}

// quietRedis drops go-redis' log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// oneLine joins the lines of s.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
