package delaystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// call is one script invocation.
type call struct {
	keys []string
	args []any
	// fence is a string key of the call's shard (its seq key) that evalConfirmed writes
	// with INCRBY 0 before WAIT (wait.go); empty for calls that are never confirmed.
	fence string
	// sc, when set, is the call's own script, overriding evalOn's (a pipeline of several
	// scripts: Exchange).
	sc *script
}

// script returns the call's script: its own, else def.
func (c call) script(def *script) *script {
	if c.sc != nil {
		return c.sc
	}
	return def
}

// evalPipelined runs sc once per call, all in one pipeline, without WAIT (for writes
// whose loss in a failover only costs a duplicate: claim leases, acks, retries). Errors
// are left in the returned commands.
func (s *Store) evalPipelined(ctx context.Context, sc *script, calls []call) []*redis.Cmd {
	return s.evalOn(ctx, s.rdb, "", sc, calls, false)
}

// evalOn runs sc (or a call's own script) once per call, all in one pipeline on c, by SHA; the calls that got
// NOSCRIPT (script cache flushed, or a node that never saw SCRIPT LOAD) did not run and are
// sent again with EVAL in a second pipeline. With confirm, each pipeline ends with the WAIT
// fence (confirmPipeline), so the EVAL resend is confirmed too; master names c in errors.
// Errors are left in the returned commands. No calls: no I/O, no commands (a batch whose
// every call failed before it was sent, e.g. at interning names, has nothing to confirm).
func (s *Store) evalOn(ctx context.Context, c pipeliner, master string, sc *script, calls []call, confirm bool) []*redis.Cmd {
	if len(calls) == 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	s.sendPipeline(ctx, c, master, calls, all, cmds, confirm, func(p redis.Pipeliner, c call) *redis.Cmd {
		return c.script(sc).EvalSha(ctx, p, c.keys, c.args...)
	})
	var again []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	s.sendPipeline(ctx, c, master, calls, again, cmds, confirm, func(p redis.Pipeliner, c call) *redis.Cmd {
		return c.script(sc).Eval(ctx, p, c.keys, c.args...)
	})
	return cmds
}

// sendPipeline sends calls[i] for every i in idx in one pipeline on c, storing their
// commands in cmds[i]; with confirm the pipeline ends with the WAIT fence, and the
// commands that succeeded get an error when WAIT does not confirm them. An empty idx
// sends nothing (there is no call whose fence WAIT could follow).
func (s *Store) sendPipeline(ctx context.Context, c pipeliner, master string, calls []call, idx []int,
	cmds []*redis.Cmd, confirm bool, send func(redis.Pipeliner, call) *redis.Cmd) {
	if len(idx) == 0 {
		return
	}
	pipe := c.Pipeline()
	for _, i := range idx {
		cmds[i] = send(pipe, calls[i])
	}
	var wait *redis.IntCmd
	if confirm {
		wait = s.appendWait(ctx, pipe, calls[idx[0]].fence)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	if wait != nil {
		s.confirmed(wait, master, cmds, idx)
	}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

func toInt64(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	default:
		return 0, fmt.Errorf("unexpected reply type %T", v)
	}
}
