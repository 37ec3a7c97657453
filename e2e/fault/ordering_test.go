//go:build fault

package fault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// P1: ordering keys under kill -9 of the owner. Two replicas; 1,000 keys x 20 messages,
// each with a random delay of 0-2 s (so a key's later messages are often due before its
// earlier ones), sent in 20 rounds of one message per key, each round parked before the
// next is sent (the order promised is the parking order), all parked before the first kill; then the replica owning the most
// shards is killed, restarted, and the owner killed again while the chains deliver. For
// every key the first copies arrive in publish order (a duplicate of a predecessor after
// its successor is allowed: at-least-once), none early, none lost.
func TestP1OrderingKeysOwnerKilled(t *testing.T) {
	const keys, perKey = 1000, 20
	s := newStack(t)
	c := newChecker(t, s)
	start := func() *e2etest.Bridge { // each its own env: Start writes its addresses into it
		return e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_LEASE", "3s"))
	}
	bs := []*e2etest.Bridge{start(), start()}
	waitOwnedBy(t, 10*time.Second, bs...)
	order := newKeyOrder(t, s.nc)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 41))
	var seqs []string
	for j := range perKey {
		for k := range keys {
			d := time.Duration(rng.IntN(2001)) * time.Millisecond
			seqs = append(seqs, c.publishKeyed(fmt.Sprintf("p1-%d-%d", k, j), fmt.Sprintf("key-%d", k), d))
		}
		// The order promised is the parking order (SPEC section 11). Two replicas take
		// turns on one JetStream consumer, so a round is parked before the next is sent:
		// then parking order is publish order.
		c.waitParked(60 * time.Second)
	}
	for kill := range 2 {
		victim := 0
		for i, b := range bs {
			if owned(b) > owned(bs[victim]) {
				victim = i
			}
		}
		bs[victim].Kill(t)
		t.Logf("kill %d: the owner of the most shards killed", kill+1)
		bs[victim] = start()
		waitOwnedBy(t, 10*time.Second, bs...)
		time.Sleep(500 * time.Millisecond)
	}
	r := c.await(seqs, 90*time.Second)
	requireSafe(t, r)
	if bad := order.outOfOrder(); len(bad) > 0 {
		t.Fatalf("%d keys out of order, e.g. %s", len(bad), strings.Join(bad[:min(len(bad), 5)], "; "))
	}
	t.Logf("P1: %d keys x %d messages, 2 owners killed: 0 keys out of order; %s", keys, perKey, r)
}

// waitParked waits until every message sent to delay.in so far was acknowledged to
// JetStream by the bridge (parked): the PubAcks, then the consumer's ack floor.
func (c *checker) waitParked(within time.Duration) {
	c.t.Helper()
	select {
	case <-c.js.PublishAsyncComplete():
	case <-time.After(within):
		c.t.Fatal("PubAcks for delay.in did not arrive")
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	str, err := c.s.js.Stream(ctx, "IN")
	if err != nil {
		c.t.Fatal(err)
	}
	for {
		si, err1 := str.Info(ctx)
		cons, err2 := str.Consumer(ctx, "delaybridge")
		if err := errors.Join(err1, err2); err != nil {
			c.t.Fatalf("waiting for the bridge to park: %v", err)
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			c.t.Fatalf("waiting for the bridge to park: %v", err)
		}
		if ci.AckFloor.Stream >= si.State.LastSeq {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// publishKeyed is publishOne with x-delay-ordering-key key.
func (c *checker) publishKeyed(seq, key string, d time.Duration) string {
	c.t.Helper()
	m := nats.NewMsg("delay.in")
	m.Header.Set("x-delay", strconv.FormatInt(d.Milliseconds(), 10))
	m.Header.Set("x-target", "out.fault")
	m.Header.Set("x-delay-ordering-key", key)
	m.Header.Set("seq", seq)
	c.expect(seq, d)
	if _, err := c.js.PublishMsgAsync(m); err != nil {
		c.t.Fatalf("publish %s: %v", seq, err)
	}
	return seq
}

// keyOrder records, per key, the message numbers of the first copies in arrival order
// (seq "<prefix>-<key>-<number>" on out.fault).
type keyOrder struct {
	mu     sync.Mutex
	seen   map[string]bool
	firsts map[string][]int
}

func newKeyOrder(t *testing.T, nc *nats.Conn) *keyOrder {
	t.Helper()
	o := &keyOrder{seen: map[string]bool{}, firsts: map[string][]int{}}
	sub, err := nc.Subscribe("out.fault", func(m *nats.Msg) {
		seq := m.Header.Get("seq")
		i := strings.LastIndexByte(seq, '-')
		n, err := strconv.Atoi(seq[i+1:])
		if i < 0 || err != nil {
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if !o.seen[seq] {
			o.seen[seq] = true
			o.firsts[seq[:i]] = append(o.firsts[seq[:i]], n)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return o
}

// outOfOrder describes every key whose first copies did not arrive in publish order.
func (o *keyOrder) outOfOrder() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var bad []string
	for key, ns := range o.firsts {
		for i := 1; i < len(ns); i++ {
			if ns[i] < ns[i-1] {
				bad = append(bad, fmt.Sprintf("%s arrived as %v", key, ns))
				break
			}
		}
	}
	return bad
}

// P2: ordering keys across a Redis failover. Two replicas of the bridge with
// BRIDGE_REDIS_MIN_REPLICAS=1 on a primary, one replica and 3 sentinels; 300 keys x 10
// messages with random delays of 0-3 s, each round parked before the next; then, while the
// chains deliver, the primary is killed (kill -9), the replica promoted, and the old
// primary restarted as its replica. Parks were WAITed; acks need not be, so a head whose
// ack the failover lost comes back with its successor held again: a duplicate after the
// successor at worst. For every key the first copies arrive in publish order; lost 0,
// early 0.
func TestP2OrderingKeysFailover(t *testing.T) {
	const keys, perKey = 300, 10
	d := testredis.StartSentinel(t, testredis.SentinelOptions{Replicas: 1})
	s := newTopologyStack(t, "BRIDGE_REDIS_SENTINEL_ADDRS", strings.Join(d.Addrs(), ","),
		"BRIDGE_REDIS_SENTINEL_MASTER", testredis.SentinelMaster)
	c := newChecker(t, s)
	for range 2 {
		e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_REDIS_MIN_REPLICAS", "1", "BRIDGE_LEASE", "3s",
			"BRIDGE_REDIS_WAIT_TIMEOUT", "250ms"))
	}
	order := newKeyOrder(t, s.nc)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 42))
	var seqs []string
	for j := range perKey {
		for k := range keys {
			d := time.Duration(rng.IntN(3001)) * time.Millisecond
			seqs = append(seqs, c.publishKeyed(fmt.Sprintf("p2-%d-%d", k, j), fmt.Sprintf("key-%d", k), d))
		}
		c.waitParked(60 * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	old, err := d.KillPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	primary, err := d.WaitPromoted(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	old.Restart(t) // back with its AOF; the sentinels make it the new primary's replica
	r := c.await(seqs, 90*time.Second)
	requireSafe(t, r)
	if bad := order.outOfOrder(); len(bad) > 0 {
		t.Fatalf("%d keys out of order, e.g. %s", len(bad), strings.Join(bad[:min(len(bad), 5)], "; "))
	}
	t.Logf("P2: %d keys x %d messages, primary %s killed, %s promoted: 0 keys out of order; %s",
		keys, perKey, old.Addr(), primary.Addr(), r)
}
