//go:build fault

package fault

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/failpoint"
	"github.com/delaybridge/delaybridge/internal/testproxy"
)

// Fleet rows (issue 13): each shard is claimed by one replica, its owner. These rows check
// that ownership moves without loss when replicas join, leave and die, and that the claim
// lease, not ownership, is what keeps every message claimed once.

const fleetShards = 16 // the bridge's default BRIDGE_SHARDS

// owned is a replica's delaybridge_owned_shards, -1 when /metrics does not answer.
func owned(b *e2etest.Bridge) int {
	m, ok := metrics(b)
	if !ok {
		return -1
	}
	v, found := m["delaybridge_owned_shards"]
	if !found {
		return -1
	}
	return int(v)
}

// ownedSum is the shards owned over bridges, and each one's count.
func ownedSum(bridges ...*e2etest.Bridge) (int, []int) {
	sum, each := 0, make([]int, len(bridges))
	for i, b := range bridges {
		each[i] = owned(b)
		sum += max(each[i], 0)
	}
	return sum, each
}

// waitOwnedBy waits until bridges own every shard between them, each shard once (the
// gauges sum to fleetShards); it returns how long that took.
func waitOwnedBy(t *testing.T, within time.Duration, bridges ...*e2etest.Bridge) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		sum, each := ownedSum(bridges...)
		if sum == fleetShards {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("shards owned %v (sum %d), want a sum of %d within %s", each, sum, fleetShards, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// published is a replica's delaybridge_messages_out_total{broker="nats",result="published"}.
func published(t *testing.T, b *e2etest.Bridge) float64 {
	t.Helper()
	code, body := e2etest.HTTPGet("http://" + b.HTTPAddr + "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, `delaybridge_messages_out_total{broker="nats",result="published"} `); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("published sample %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// E7: two replicas deliver a paced load; two more join. The shards are spread over four
// owners (each shard once), nothing is lost, early or delivered twice.
func TestE7ReplicasJoinUnderLoad(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	a := e2etest.StartReady(t, bridgeBin, s.envWith())
	b := e2etest.StartReady(t, bridgeBin, s.envWith())
	waitOwnedBy(t, 10*time.Second, a, b)
	stop := c.sendPaced("e7", 400, uniform(time.Second))
	time.Sleep(time.Second)
	joined := time.Now()
	c2 := e2etest.StartReady(t, bridgeBin, s.envWith())
	d := e2etest.StartReady(t, bridgeBin, s.envWith())
	took := waitOwnedBy(t, 10*time.Second, a, b, c2, d)
	time.Sleep(2 * time.Second)
	seqs := stop()
	r := c.await(seqs, 30*time.Second)
	_, each := ownedSum(a, b, c2, d)
	t.Logf("E7: 2 replicas, then 4 (spread %v, %s after the joiners started, %s after they were ready): %s",
		each, time.Since(joined).Round(time.Millisecond), took.Round(time.Millisecond), r)
	requireSafe(t, r)
	if r.dups != 0 || r.streamExtra != 0 {
		t.Fatalf("a message was delivered more than once without any fault: %s", r)
	}
}

// E8: SIGTERM to one of three replicas under load: it leaves the fleet as it stops, the
// other two own every shard at once (well within a heartbeat), nothing is lost or early.
func TestE8OwnerLeavesOnSigterm(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	bs := []*e2etest.Bridge{
		e2etest.StartReady(t, bridgeBin, s.envWith()),
		e2etest.StartReady(t, bridgeBin, s.envWith()),
		e2etest.StartReady(t, bridgeBin, s.envWith()),
	}
	waitOwnedBy(t, 10*time.Second, bs...)
	leaver := 0
	for i, b := range bs {
		if owned(b) > owned(bs[leaver]) {
			leaver = i
		}
	}
	rest := append(append([]*e2etest.Bridge(nil), bs[:leaver]...), bs[leaver+1:]...)
	stop := c.sendPaced("e8", 400, uniform(time.Second))
	time.Sleep(time.Second)
	had := owned(bs[leaver])
	stopped := make(chan error, 1)
	go func() { err, _ := bs[leaver].Stop(t, 15*time.Second); stopped <- err }()
	took := waitOwnedBy(t, 3*time.Second, rest...)
	if err := <-stopped; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	time.Sleep(time.Second)
	r := c.await(stop(), 30*time.Second)
	t.Logf("E8: the owner of %d shards stopped (SIGTERM); the other two owned all %d after %s: %s",
		had, fleetShards, took.Round(time.Millisecond), r)
	requireSafe(t, r)
	if took > time.Second {
		t.Fatalf("the shards of a replica that left took %s to move, want well under the heartbeat (1 s)", took)
	}
}

// E9: kill -9 of the replica owning the most shards, under load: its shards are claimed
// again within BRIDGE_OWNERSHIP_TTL x 4/3 (4 s by default); its claimed messages come back
// after their lease. Lost 0, early 0; the takeover time is reported.
func TestE9OwnerKilledTakeover(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	bs := []*e2etest.Bridge{ // e2etest.Start writes each one's addresses into its env
		e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_LEASE", "3s")),
		e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_LEASE", "3s")),
		e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_LEASE", "3s")),
	}
	waitOwnedBy(t, 10*time.Second, bs...)
	victim := 0
	for i, b := range bs {
		if owned(b) > owned(bs[victim]) {
			victim = i
		}
	}
	rest := append(append([]*e2etest.Bridge(nil), bs[:victim]...), bs[victim+1:]...)
	stop := c.sendPaced("e9", 400, uniform(time.Second))
	time.Sleep(time.Second)
	had := owned(bs[victim])
	bs[victim].Kill(t)
	took := waitOwnedBy(t, 4*time.Second+2*time.Second, rest...)
	time.Sleep(2 * time.Second)
	r := c.await(stop(), 30*time.Second)
	t.Logf("E9: the owner of %d shards was killed; the others owned all %d after %s (bound: TTL 3s x 4/3 = 4s): %s",
		had, fleetShards, took.Round(time.Millisecond), r)
	requireSafe(t, r)
}

// E10: forced ownership overlap. Eight replicas each claim every shard
// (DELAYBRIDGE_TEST_CLAIM_ALL: as if each believed it owned all of them) while 5000
// messages fall due together: the claim lease still hands each message to one replica.
// Delivered exactly once, none early.
func TestE10ForcedOwnershipOverlap(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	for range 8 {
		e2etest.StartReady(t, bridgeBin, s.envWith(failpoint.ClaimAllEnv, "1"))
	}
	seqs := c.send("e10", 5000, func(int) time.Duration { return 1500 * time.Millisecond })
	r := c.await(seqs, 30*time.Second)
	requireSafe(t, r)
	if r.dups != 0 || r.streamExtra != 0 {
		t.Fatalf("a message was delivered more than once by overlapping owners: %s", r)
	}
}

// E11: a replica whose Redis connection stalls (every reply delayed 2 s, past its
// ownership TTL of 1 s; its requests still arrive) stops claiming once its membership may
// have expired, and the other replica takes every shard (its heartbeats reach Redis but,
// unanswered, do not renew it); when the stall ends it rejoins. Lost 0, early 0, and the
// stalled replica publishes nothing it claimed after its membership lapsed. Lateness is
// high for what the stalled replica had taken in (its parks wait 2 s per round trip).
func TestE11StalledOwnerStopsClaiming(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	direct := s.envWith("BRIDGE_OWNERSHIP_TTL", "1s")
	p := s.proxied(t, "read_timeout=6s&write_timeout=6s")
	stalled := e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_OWNERSHIP_TTL", "1s"))
	other := e2etest.StartReady(t, bridgeBin, direct)
	waitOwnedBy(t, 10*time.Second, stalled, other)
	if owned(stalled) == 0 {
		t.Fatal("set-up: the replica to stall owns no shard")
	}
	stop := c.sendPaced("e11", 300, uniform(time.Second))
	time.Sleep(time.Second)
	p.AddToxic(t, testproxy.Toxic{Name: "stall", Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": 2000}})
	// The other replica owns all shards within TTL x 4/3 plus the time its own heartbeat
	// needs to see the stalled member expire.
	took := waitOwnedBy(t, 4*time.Second, other)
	// The stalled replica stopped claiming at its TTL; claims it sent before that come
	// back (2 s late) and are published. After that, nothing more.
	time.Sleep(2500 * time.Millisecond)
	before := published(t, stalled)
	time.Sleep(3 * time.Second)
	after := published(t, stalled)
	if n := owned(stalled); n != 0 {
		t.Errorf("the stalled replica still reports %d owned shards", n)
	}
	p.RemoveToxic(t, "stall")
	rejoinBy := time.Now().Add(10 * time.Second)
	for owned(stalled) <= 0 || owned(stalled)+owned(other) != fleetShards {
		if time.Now().After(rejoinBy) {
			t.Fatalf("the replica did not get shards back within 10 s after the stall: owns %d, the other %d", owned(stalled), owned(other))
		}
		time.Sleep(20 * time.Millisecond)
	}
	rejoined := owned(stalled)
	time.Sleep(time.Second)
	r := c.await(stop(), 30*time.Second)
	t.Logf("E11: stalled owner; the other owned all %d after %s; the stalled one published %v then %v 3 s later; after the stall it owns %d again: %s",
		fleetShards, took.Round(time.Millisecond), before, after, rejoined, r)
	requireSafe(t, r)
	if after != before {
		t.Fatalf("the stalled replica published %v messages after its membership lapsed", after-before)
	}
}
