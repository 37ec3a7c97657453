package egress

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testproxy"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// Egress started while Redis is unreachable waits for it (the wake-up subscription is
// retried) instead of failing, and delivers once Redis is back.
func TestStartsIntoRedisOutage(t *testing.T) {
	srv := testredis.Start(t)
	p := testproxy.Start(t, srv.Addr())
	cfg := delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: 5 * time.Second}
	direct := newStore(t, srv.Addr(), cfg)
	if err := direct.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	viaProxy := newStore(t, p.Addr(), cfg)
	park(t, direct, "m1", 0, "nats:orders.timeout", nil)

	p.Cut()
	gc := newBroker(t)
	out := collect(t, gc, "orders.timeout")
	runEgress(t, Config{}, viaProxy, map[string]message.Publisher{"nats": gc})
	select {
	case g := <-out:
		t.Fatalf("delivered %s while Redis was unreachable", g.msg.UUID)
	case <-time.After(time.Second):
	}
	p.Restore(t)
	waitFor(t, out, 15*time.Second)
}

func newStore(t *testing.T, addr string, cfg delaystore.Config) *delaystore.Store {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	st, err := delaystore.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
