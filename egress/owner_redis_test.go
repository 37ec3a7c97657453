package egress

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testproxy"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// startEgress runs an egress until the returned stop is called (or the test ends); Run
// must return nil.
func startEgress(t *testing.T, cfg Config, st Claimer, pubs map[string]message.Publisher) (*Egress, func()) {
	t.Helper()
	if cfg.DLQSubject == "" {
		cfg.DLQSubject = "delay.dlq"
	}
	e, err := New(cfg, st, pubs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("egress Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return e, stop
}

// waitPartition waits until the egresses own every one of shards shards between them, each
// once, and each owns some; it returns how long that took.
func waitPartition(t *testing.T, shards int, within time.Duration, es ...*Egress) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		seen := map[int]int{}
		for _, e := range es {
			for _, s := range e.Owned() {
				seen[s]++
			}
		}
		ok := len(seen) == shards
		for _, n := range seen {
			ok = ok && n == 1
		}
		for _, e := range es {
			ok = ok && len(e.Owned()) > 0 // every one has joined
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("shards owned %v after %s, want each of %d once", seen, within, shards)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two replicas split the shards between them and deliver every message once; when one
// stops, the other owns every shard at once (it left the fleet on its way out).
func TestOwnershipSplitsAndHandsOver(t *testing.T) {
	srv := testredis.Start(t)
	cfg := delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 16, Lease: 5 * time.Second}
	st := newStore(t, srv.Addr(), cfg)
	if err := st.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	gc := newBroker(t)
	out := collect(t, gc, "own")
	pubs := map[string]message.Publisher{"nats": gc}
	a, stopA := startEgress(t, Config{MemberID: "a", OwnershipTTL: time.Second}, st, pubs)
	b, _ := startEgress(t, Config{MemberID: "b", OwnershipTTL: time.Second}, st, pubs)
	waitPartition(t, 16, 5*time.Second, a, b)
	for i := range 200 {
		park(t, st, fmt.Sprintf("m%d", i), time.Duration(i%20)*10*time.Millisecond, "nats:own", nil)
	}
	got := map[string]int{}
	for range 200 {
		g := waitFor(t, out, 10*time.Second)
		got[g.msg.UUID]++
	}
	stopA()
	took := waitPartition(t, 16, 2*time.Second, b)
	t.Logf("a=%v took over by b in %s", a.Owned(), took)
	if took > 500*time.Millisecond {
		t.Fatalf("the shards of a replica that left took %s to move", took)
	}
	for i := range 50 {
		park(t, st, fmt.Sprintf("n%d", i), 0, "nats:own", nil)
	}
	for range 50 {
		g := waitFor(t, out, 10*time.Second)
		got[g.msg.UUID]++
	}
	for id, n := range got {
		if n != 1 {
			t.Fatalf("%s delivered %d times", id, n)
		}
	}
	waitEmpty(t, st)
}

// A replica cut off from Redis stops claiming when its membership may have expired
// (Owned is empty after OwnershipTTL), and the other takes every shard within TTL x 4/3
// (plus a heartbeat's round trip); when the cut ends, it rejoins.
func TestOwnershipLapseOnCutConnection(t *testing.T) {
	srv := testredis.Start(t)
	p := testproxy.Start(t, srv.Addr())
	cfg := delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 16, Lease: 5 * time.Second}
	direct := newStore(t, srv.Addr(), cfg)
	if err := direct.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	viaProxy := newStore(t, p.Addr(), cfg)
	gc := newBroker(t)
	pubs := map[string]message.Publisher{"nats": gc}
	const ttl = 600 * time.Millisecond
	cut, _ := startEgress(t, Config{MemberID: "cut", OwnershipTTL: ttl}, viaProxy, pubs)
	other, _ := startEgress(t, Config{MemberID: "other", OwnershipTTL: ttl}, direct, pubs)
	waitPartition(t, 16, 5*time.Second, cut, other)
	p.Cut()
	at := time.Now()
	took := waitPartition(t, 16, 3*time.Second, other)
	deadline := at.Add(ttl + time.Second)
	for len(cut.Owned()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cut replica still owns %v %s after the cut", cut.Owned(), time.Since(at))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("cut: the other owned every shard after %s; the cut one owned none after %s", took, time.Since(at))
	if took > ttl*4/3+500*time.Millisecond {
		t.Fatalf("takeover took %s, bound TTL x 4/3 = %s", took, ttl*4/3)
	}
	p.Restore(t)
	waitPartition(t, 16, 10*time.Second, cut, other) // it got shards back
}
