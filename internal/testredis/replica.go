package testredis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica spawns a redis-server (as [Start] does, with extraArgs) that replicates
// primary, and blocks until primary counts it as an online replica and its link is up;
// t.Fatal on failure, never skips.
func StartReplica(t testing.TB, primary *Server, extraArgs ...string) *Server {
	t.Helper()
	p := redis.NewClient(&redis.Options{Addr: primary.Addr(), MaxRetries: -1})
	err := p.ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err() // not the default 5 s
	p.Close()
	if err != nil {
		t.Fatalf("testredis: replica of %s: %v", primary.Addr(), err)
	}
	args := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.port), "--repl-diskless-sync-delay", "0"}, extraArgs...)
	r := start(t, &Server{dir: t.TempDir(), args: args})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := poll(ctx, func(ctx context.Context) error { return replicaOnline(ctx, primary, r) }); err != nil {
		t.Fatalf("testredis: replica %s of %s: %v", r.Addr(), primary.Addr(), err)
	}
	return r
}

// replicaOnline checks that primary lists r as an online replica and r's link is up.
func replicaOnline(ctx context.Context, primary, r *Server) error {
	p := redis.NewClient(&redis.Options{Addr: primary.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
	defer p.Close()
	info, err := p.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "port="+strconv.Itoa(r.port)+",state=online") {
		return fmt.Errorf("primary does not list the replica online: %q", info)
	}
	rc := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
	defer rc.Close()
	if info, err = rc.Info(ctx, "replication").Result(); err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("replica link not up")
	}
	return nil
}
