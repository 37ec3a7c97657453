package delaystore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated durability (Config.MinReplicas = N > 0). Redis replicates asynchronously: a
// write the master answered can vanish in a failover. So every write on which a source
// acknowledgement or an answer depends (Park, which also serves the API upsert, and Cancel;
// later bulk changes through evalConfirmed) is confirmed by WAIT N timeout, sent as the last
// command of the same pipeline, on the same connection, to the master that executed the
// scripts. WAIT answers how many replicas acknowledged the connection's latest write;
// fewer than N fails the write with ErrNotReplicated.
//
// The fence: just before WAIT the pipeline sends INCRBY <the shard's seq key> 0. It changes
// no value but is replicated, so the connection's latest write offset becomes the master's
// current offset. Without it a repeated Park (idempotent: it writes nothing) or Cancel (the
// id is already gone) would be confirmed against an older offset of this connection, not
// the one of the first attempt that wrote the message (on another connection) and whose WAIT
// fell short (WAIT's documented semantics: the writes of the current connection). Redis
// 7.0.15 moves a connection's WAIT offset on every command, so there the fence is redundant
// (TestWaitFence passes without it); it keeps the guarantee on servers that do not. Under
// maxmemory the fence may be refused (-OOM); WAIT then confirms the connection's own
// writes only.
//
// Cluster: a go-redis cluster pipeline splits commands per node and sends a key-less WAIT
// to a random node, so evalPerMaster groups the calls by master (MasterForKey) and runs one
// pipeline per master on that node's client, in parallel. A MOVED or ASK answer means the
// script did not run there: the call fails (the caller retries) and the slot map is
// reloaded.

// Option adjusts a Store made by New.
type Option func(*Store)

// WithLogger sets the logger of the store's own events: the replicas found by Init and the
// start (Warn) and end (Info) of a streak of WAIT shortfalls. Default: none.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) {
		if l != nil {
			s.log = l
		}
	}
}

// WaitShortfalls returns how many WAITs confirmed fewer than Config.MinReplicas replicas
// since New (each failed the writes of its pipeline). It does not block; safe for
// concurrent use.
func (s *Store) WaitShortfalls() uint64 { return s.shortfalls.Load() }

// pipeliner is what evalOn needs of a client: redis.UniversalClient and a cluster node's
// *redis.Client both are.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// evalConfirmed runs sc once per call like evalPipelined and, with MinReplicas > 0, has
// every call confirmed by WAIT on the master that executed it (Cluster: one pipeline per
// master). A call that is not confirmed carries an error wrapping ErrNotReplicated. Every
// call must have its fence set. No calls: no I/O, no commands.
func (s *Store) evalConfirmed(ctx context.Context, sc *script, calls []call) []*redis.Cmd {
	if len(calls) == 0 {
		return nil
	}
	if sc == nil {
		sc = calls[0].sc // the calls' own script (callList), for the timing metric's name
	}
	if s.minReplicas == 0 {
		return s.evalPipelined(ctx, sc, calls)
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return s.evalPerMaster(ctx, cc, sc, calls)
	}
	return s.evalOn(ctx, s.rdb, primaryName(s.rdb), sc, calls, true)
}

// evalPerMaster groups the calls by the master that serves their slot and runs each group
// in its own confirmed pipeline on that master's client, all groups in parallel.
func (s *Store) evalPerMaster(ctx context.Context, cc *redis.ClusterClient, sc *script, calls []call) []*redis.Cmd {
	start := time.Now()
	cmds := make([]*redis.Cmd, len(calls))
	groups := map[*redis.Client][]int{}
	var order []*redis.Client
	for i, c := range calls {
		node, err := cc.MasterForKey(ctx, c.keys[0])
		if err != nil {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(fmt.Errorf("find the master of %s: %w", c.keys[0], err))
			continue
		}
		if _, ok := groups[node]; !ok {
			order = append(order, node)
		}
		groups[node] = append(groups[node], i)
	}
	var wg sync.WaitGroup
	for _, node := range order {
		idx := groups[node]
		wg.Go(func() {
			sub := make([]call, len(idx))
			for k, i := range idx {
				sub[k] = calls[i]
			}
			res := s.evalOn(ctx, node, "redis master "+node.Options().Addr, sc, sub, true)
			for k, i := range idx {
				cmds[i] = res[k]
			}
		})
	}
	wg.Wait()
	if f := s.timer.Load(); f != nil {
		(*f)(sc.label(), time.Since(start)) // the node clients do not run the cluster's hooks
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
			cc.ReloadState(ctx) // lazily: the caller's retry finds the new master
			break
		}
	}
	return cmds
}

// appendWait adds the fence and WAIT to pipe and returns the WAIT command.
func (s *Store) appendWait(ctx context.Context, pipe redis.Pipeliner, fence string) *redis.IntCmd {
	pipe.IncrBy(ctx, fence, 0) // its error (e.g. -OOM) is ignored: see the fence above
	// redis.Pipeliner has no Wait method: the command is built by hand.
	wait := redis.NewIntCmd(ctx, "wait", s.minReplicas, s.waitTimeout.Milliseconds())
	_ = pipe.Process(ctx, wait) // queues it; the answer is read after Exec
	return wait
}

// confirmed reads the WAIT answer of a pipeline: when it failed or confirmed fewer than
// MinReplicas replicas, every command cmds[i] (i in idx) that succeeded gets an error
// instead (its write may stand on the master, but is not durable across a failover);
// master names the server in messages.
func (s *Store) confirmed(wait *redis.IntCmd, master string, cmds []*redis.Cmd, idx []int) {
	n, err := wait.Result()
	where := master
	switch {
	case err != nil:
		err = fmt.Errorf("WAIT on %s: %w", where, err)
	case n < int64(s.minReplicas):
		s.shortfalls.Add(1)
		if s.inShortfall.CompareAndSwap(false, true) {
			s.log.Warn("redis replicas did not confirm a write in time: writes fail and sources are not acked until they do",
				"master", where, "confirmed", n, "min_replicas", s.minReplicas, "timeout", s.waitTimeout)
		}
		err = fmt.Errorf("WAIT on %s: %d of %d replicas confirmed within %s: %w",
			where, n, s.minReplicas, s.waitTimeout, ErrNotReplicated)
	default:
		if s.inShortfall.CompareAndSwap(true, false) {
			s.log.Info("redis replicas confirm writes again", "master", where, "confirmed", n)
		}
		return
	}
	for _, i := range idx {
		if cmds[i].Err() == nil {
			cmds[i].SetErr(err)
		}
	}
}

// checkReplicas reads INFO replication of every master, logs its connected replicas and,
// with MinReplicas > 0, refuses a master with fewer or one that does not tell.
func (s *Store) checkReplicas(ctx context.Context) error {
	check := func(ctx context.Context, c redis.Cmdable, master string) error {
		info, err := c.Info(ctx, "replication").Result()
		var refused redis.Error
		switch {
		case errors.As(err, &refused) && s.minReplicas == 0:
			return nil // not allowed (ACL) or not told (miniredis); nothing depends on it
		case errors.As(err, &refused):
			return &ReplicaError{Master: master, Required: s.minReplicas, Refused: err}
		case err != nil:
			return fmt.Errorf("init: read INFO replication of %s: %w", master, err)
		}
		role, n := parseReplication(info)
		s.log.Info("redis replicas", "master", master, "role", role, "connected_replicas", n, "min_replicas", s.minReplicas)
		if n < s.minReplicas {
			return &ReplicaError{Master: master, Role: role, Connected: n, Required: s.minReplicas}
		}
		return nil
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return check(ctx, c, "redis master "+c.Options().Addr)
		})
	}
	return check(ctx, s.rdb, primaryName(s.rdb))
}

// primaryName names the server a standalone or Sentinel client writes to, for messages.
func primaryName(rdb redis.UniversalClient) string {
	if c, ok := rdb.(*redis.Client); ok {
		if _, _, err := net.SplitHostPort(c.Options().Addr); err == nil {
			return "redis " + c.Options().Addr // a Sentinel client's Addr is not the primary's
		}
	}
	return "the redis primary"
}

// parseReplication reads role and connected_slaves from INFO replication.
func parseReplication(info string) (role string, replicas int) {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "role:"); ok {
			role = v
		}
		if v, ok := strings.CutPrefix(line, "connected_slaves:"); ok {
			replicas, _ = strconv.Atoi(v)
		}
	}
	return role, replicas
}
