package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testproxy"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestTargetsNextDueOnSlowRedis: on a 1,500-message store behind 30 ms of network latency,
// GET /v1/targets finds the next due of every target, the rare one parked after all of
// the common one's messages too: the look-up is bounded by the entries it reads, not cut
// after 100 ms (issue 23, item 13).
func TestTargetsNextDueOnSlowRedis(t *testing.T) {
	srv := testredis.Start(t)
	proxy := testproxy.Start(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 16, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(time.Hour).UnixMilli()
	var reqs []delaystore.ParkRequest
	park := func(id, target string, at int64) {
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Absolute: true, At: at,
			Envelope: delaystore.Envelope{Target: target, Source: "http", Payload: []byte("x")}})
	}
	for i := range 1499 {
		park(fmt.Sprintf("c%d", i), "nats:common", base+int64(i))
	}
	park("r", "nats:rare", base+10_000)
	if _, err := st.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	proxy.AddToxic(t, testproxy.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 30}})
	c := newAPIOn(t, "", st)
	res, err := c.Targets(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"nats:common": base, "nats:rare": base + 10_000}
	if len(res.Targets) != 2 {
		t.Fatalf("targets %+v", res.Targets)
	}
	for _, tg := range res.Targets {
		if tg.NextDue == nil || *tg.NextDue != want[tg.Target] {
			t.Errorf("%s: next_due %v, want %d", tg.Target, tg.NextDue, want[tg.Target])
		}
	}
}
