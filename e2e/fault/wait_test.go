//go:build fault

package fault

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// B7 with BRIDGE_REDIS_MIN_REPLICAS (issue 12): a Sentinel deployment of 1 primary, 1
// replica and 3 sentinels, so that N = 1 is every replica of the primary, and JetStream
// in and out at about 500 messages a second while the primary changes.

// TestB7WaitSwitchover: SENTINEL FAILOVER with BRIDGE_REDIS_MIN_REPLICAS=1. The promoted
// replica stops acknowledging the old primary, whose WAIT then answers 0: every park it
// takes from then on fails and is retried, not acked, until the bridge writes to the new
// primary and the old one replicates it. Lost 0, early 0. The WAIT timeout is short
// (250 ms), so that the old primary's WAITs answer within the switchover window: then the
// replica count, not the FailoverClient's closing of the old connections at
// +switch-master, is what refuses the writes.
func TestB7WaitSwitchover(t *testing.T) {
	r := waitFault(t, "b7ws", 1, "1", switchover, "BRIDGE_REDIS_WAIT_TIMEOUT", "250ms")
	requireSafe(t, r)
}

// TestB7WaitKill: kill -9 of the primary with BRIDGE_REDIS_MIN_REPLICAS=1. The promoted
// replica has no replica of its own until the killed node comes back (restarted here once
// the sentinels named the new primary; they turn it into a replica): parks fail
// meanwhile, nothing is acked, nothing is lost.
func TestB7WaitKill(t *testing.T) {
	r := waitFault(t, "b7wk", 1, "1", func(ctx context.Context, t *testing.T, d *testredis.Sentinel) (*testredis.Server, error) {
		old, err := d.KillPrimary(ctx)
		if err != nil {
			return nil, err
		}
		// Every sentinel must know the new primary before the old one comes back: one
		// that does not sees a sane master again and undoes the failover (seen in CI).
		if _, err := d.WaitPromoted(ctx, old); err != nil {
			return nil, err
		}
		old.Restart(t) // it comes back as a master with its AOF; the sentinels demote it
		return old, nil
	})
	requireSafe(t, r)
}

// TestB7NoWaitSwitchover: the same switchover with BRIDGE_REDIS_MIN_REPLICAS=0 (the
// default): the writes the old primary took after the promotion are lost. Early 0 is
// asserted; the loss is reported.
func TestB7NoWaitSwitchover(t *testing.T) {
	r := waitFault(t, "b7ns", 1, "0", switchover)
	t.Logf("B7 switchover without WAIT: lost %d of %d", r.lost, r.messages)
	if r.early != 0 {
		t.Fatalf("early deliveries: %s", r)
	}
}

// TestB7WaitOneOfTwo: the switchover with 2 replicas and BRIDGE_REDIS_MIN_REPLICAS=1, the
// set-up docs/operating.md advises against. The replica that is not promoted stays attached to the
// old primary until the sentinels re-point it, and its acknowledgement is enough for WAIT 1;
// it then resyncs from the new primary and drops those writes. Early 0 is asserted; the
// loss is reported (it depends on the timing of the sentinels).
func TestB7WaitOneOfTwo(t *testing.T) {
	r := waitFault(t, "b7w2", 2, "1", switchover, "BRIDGE_REDIS_WAIT_TIMEOUT", "250ms")
	t.Logf("B7 switchover, 2 replicas, BRIDGE_REDIS_MIN_REPLICAS=1: lost %d of %d", r.lost, r.messages)
	if r.early != 0 {
		t.Fatalf("early deliveries: %s", r)
	}
}

// TestB7WaitTooFewReplicas: BRIDGE_REDIS_MIN_REPLICAS greater than the primary's replicas
// stops the start with an error naming the primary and both counts.
func TestB7WaitTooFewReplicas(t *testing.T) {
	d := testredis.StartSentinel(t, testredis.SentinelOptions{Replicas: 1})
	s := newTopologyStack(t, "BRIDGE_REDIS_SENTINEL_ADDRS", strings.Join(d.Addrs(), ","),
		"BRIDGE_REDIS_SENTINEL_MASTER", testredis.SentinelMaster)
	b := e2etest.Start(t, bridgeBin, s.envWith("BRIDGE_REDIS_MIN_REPLICAS", "2"))
	if err := b.Wait(t, 30*time.Second); err == nil {
		t.Fatal("the bridge started with BRIDGE_REDIS_MIN_REPLICAS=2 and 1 replica")
	}
	out := b.Out.String()
	if !strings.Contains(out, "has 1 connected replicas, fewer than BRIDGE_REDIS_MIN_REPLICAS=2") {
		t.Fatalf("the error does not name the counts:\n%s", out)
	}
	t.Logf("refused: %s", lastLine(out))
}

func switchover(ctx context.Context, _ *testing.T, d *testredis.Sentinel) (*testredis.Server, error) {
	old, err := d.Primary(ctx)
	if err != nil {
		return nil, err
	}
	return old, d.Switchover(ctx)
}

// waitFault runs a bridge with BRIDGE_REDIS_MIN_REPLICAS=minReplicas (and env: key,
// value, ...) on 1 primary + replicas + 3 sentinels, sends at ~500 msgs/s (delays 0-1 s) for 3 s, applies fault
// (which returns the old primary), waits for the failover, sends 3 s more, and returns
// the checker's report over every message sent. It logs the failover time, the report,
// the WAIT shortfalls and the store at the end.
func waitFault(t *testing.T, name string, replicas int, minReplicas string,
	fault func(context.Context, *testing.T, *testredis.Sentinel) (*testredis.Server, error), env ...string) report {
	t.Helper()
	d := testredis.StartSentinel(t, testredis.SentinelOptions{Replicas: replicas})
	s := newTopologyStack(t, "BRIDGE_REDIS_SENTINEL_ADDRS", strings.Join(d.Addrs(), ","),
		"BRIDGE_REDIS_SENTINEL_MASTER", testredis.SentinelMaster)
	c := newChecker(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith(append([]string{"BRIDGE_REDIS_MIN_REPLICAS", minReplicas}, env...)...))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	load := c.sendPaced(name, 500, uniform(time.Second))
	time.Sleep(3 * time.Second)
	start := time.Now()
	old, err := fault(ctx, t, d)
	if err != nil {
		load()
		t.Fatal(err)
	}
	primary, err := d.WaitFailover(ctx, old)
	if err != nil {
		load()
		t.Fatal(err)
	}
	failover := time.Since(start)
	time.Sleep(3 * time.Second)
	seqs := load()
	wait := 60 * time.Second
	if minReplicas == "0" {
		wait = 15 * time.Second // losses are expected: do not wait long for them
	}
	r := c.await(seqs, wait)
	code, metrics := e2etest.HTTPGet("http://" + b.HTTPAddr + "/metrics")
	t.Logf("B7 %s (BRIDGE_REDIS_MIN_REPLICAS=%s): primary %s -> %s in %s; %s; %s; store after the run: %s", name, minReplicas,
		old.Addr(), primary.Addr(), failover.Round(100*time.Millisecond), r,
		metricLine(code, metrics, "delaybridge_redis_wait_shortfall_total"), parked(t, b))
	return r
}

// metricLine returns the line of /metrics that starts with name.
func metricLine(code int, body, name string) string {
	if code != 200 {
		return name + ": /metrics answered " + itoa(code)
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name) {
			return l
		}
	}
	return name + " missing"
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
