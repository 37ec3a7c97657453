//go:build fault

package fault

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// newTopologyStack is newStack without the standalone Redis: NATS with the streams IN and
// OUT, and the bridge's environment with redisEnv (key, value, ...) selecting the Redis
// topology instead of BRIDGE_REDIS_URL.
func newTopologyStack(t *testing.T, redisEnv ...string) *stack {
	t.Helper()
	s := newNATSStack(t)
	for i := 0; i+1 < len(redisEnv); i += 2 {
		s.env[redisEnv[i]] = redisEnv[i+1]
	}
	return s
}

// shardSlot is the cluster slot of shard i of the bridge's store (its keys share the hash
// tag {prefix:i}).
func shardSlot(prefix string, i int) int {
	return testredis.KeySlot(fmt.Sprintf("{%s:%d}", prefix, i))
}

// redirectProbe reads every shard's keys in a loop through its own cluster client and
// counts the MOVED and ASK redirects its node clients receive: evidence that a reshard
// did redirect clients while the bridge ran.
type redirectProbe struct {
	moved, ask, errs atomic.Int64
	stop             func()
	done             chan struct{}
}

func startRedirectProbe(t *testing.T, cl *testredis.Cluster, prefix string, shards int) *redirectProbe {
	t.Helper()
	p := &redirectProbe{done: make(chan struct{})}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), MaxRedirects: 8,
		NewClient: func(o *redis.Options) *redis.Client {
			c := redis.NewClient(o)
			c.AddHook(p)
			return c
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = func() {
		cancel()
		<-p.done
		cc.Close()
	}
	t.Cleanup(p.stop)
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			for i := range shards {
				if err := cc.ZCard(ctx, fmt.Sprintf("{%s:%d}:z", prefix, i)).Err(); err != nil && ctx.Err() == nil {
					p.errs.Add(1)
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return p
}

func (p *redirectProbe) count(err error) {
	if err == nil {
		return
	}
	switch s := err.Error(); {
	case strings.HasPrefix(s, "MOVED "):
		p.moved.Add(1)
	case strings.HasPrefix(s, "ASK "):
		p.ask.Add(1)
	}
}

func (p *redirectProbe) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *redirectProbe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			p.count(err) // the redirect is returned here; the cluster client clears cmd.Err
		} else {
			p.count(cmd.Err())
		}
		return err
	}
}

func (p *redirectProbe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			p.count(c.Err())
		}
		return err
	}
}

// redisErrorsLogged returns the bridge's log lines that show a Redis redirect or a
// cross-slot script: the cluster client must absorb MOVED/ASK, and every script's keys
// share one hash tag.
func redisErrorsLogged(out string) []string {
	var bad []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "CROSSSLOT") || strings.Contains(line, "MOVED ") || strings.Contains(line, "ASK ") {
			bad = append(bad, line)
		}
	}
	return bad
}

// warnings counts the bridge's WARN and ERROR log lines.
func warnings(out string) int {
	return strings.Count(out, "level=WARN") + strings.Count(out, "level=ERROR")
}
