package delaystore

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// tombKey is the tombstone key of id's shard: the ZSET of earlier versions, and the
// prefix of the bucket sets and their index (tombs.lua).
func (f *fixture) tombKey(id string) string {
	return fmt.Sprintf("{%s:%d}:t", f.prefix, f.s.ShardOf(id))
}

// tombstone returns the expiry (ms) of the live bucket of id's shard that holds src, 0
// when none does.
func (f *fixture) tombstone(t *testing.T, id, src string) int64 {
	t.Helper()
	tk := f.tombKey(id)
	for _, e := range f.rdb.ZRangeByScore(t.Context(), tk+"b", &redis.ZRangeBy{Min: "-inf", Max: "+inf"}).Val() {
		if f.rdb.SIsMember(t.Context(), tk+"b:"+e, src).Val() {
			at, err := strconv.ParseInt(e, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return at
		}
	}
	return 0
}

// tombstones counts the tombstones in the bucket sets of id's shard and those sets.
func (f *fixture) tombstones(t *testing.T, id string) (n, sets int64) {
	t.Helper()
	keys, err := f.rdb.Keys(t.Context(), f.tombKey(id)+"b:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		n += f.rdb.SCard(t.Context(), k).Val()
	}
	return n, int64(len(keys))
}

// deliver claims id (due now) and acks it, as egress does after the target confirmed.
func (f *fixture) deliver(t *testing.T, id string) {
	t.Helper()
	c, _ := f.claimID(t, id, 5*time.Second)
	a, err := f.s.Ack(t.Context(), []Receipt{c.Receipt})
	if err != nil || a.N != 1 {
		t.Fatalf("ack %s: %+v %v", id, a, err)
	}
}

// sourced is a park request for a message with a source id, due at once.
func sourced(id, sourceID string, replace bool) ParkRequest {
	env := sampleEnvelope(0)
	env.SourceID = sourceID
	return ParkRequest{ID: id, Replace: replace, Envelope: env}
}

// TestTombstoneAbsorbsRedelivery: a delivered message leaves a tombstone of its source id
// for the TTL, and a redelivery of that source message is not parked again (rows A1, A3,
// B4, the Kafka kill), whether its id is the source id or an explicit x-delay-id.
func TestTombstoneAbsorbsRedelivery(t *testing.T) {
	f := setup(t, func(c *Config) { c.TombstoneTTL = time.Minute })
	ctx := t.Context()
	for _, tc := range []struct {
		name, id, src string
		replace       bool
	}{
		{"id from source", "js:IN:1", "js:IN:1", false},
		{"explicit id", "order-1", "js:IN:2", true},
		{"kafka", "kafka:delay.in:2:77", "kafka:delay.in:2:77", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p := f.park(t, sourced(tc.id, tc.src, tc.replace)); p[0].Existed || p[0].Delivered {
				t.Fatalf("first park: %+v", p[0])
			}
			before := f.now(t)
			f.deliver(t, tc.id)
			after := f.now(t)
			exp := f.tombstone(t, tc.id, tc.src)
			if exp == 0 {
				t.Fatalf("no tombstone of %s after the ack", tc.src)
			}
			// At least the TTL, at most 1.5 x TTL (buckets of TTL/2).
			if ttl := time.Minute.Milliseconds(); exp < before+ttl || exp > after+ttl+ttl/2 {
				t.Fatalf("tombstone expiry %d not in [%d, %d]", exp, before+ttl, after+ttl+ttl/2)
			}
			if pttl := f.rdb.PTTL(ctx, fmt.Sprintf("%sb:%d", f.tombKey(tc.id), exp)).Val(); pttl < time.Minute || pttl > 90*time.Second {
				t.Fatalf("bucket set expires in %s, want 1m..1m30s", pttl)
			}
			p := f.park(t, sourced(tc.id, tc.src, tc.replace))
			if !p[0].Delivered || !p[0].Existed || p[0].Due != 0 {
				t.Fatalf("redelivery after delivery: %+v, want Delivered", p[0])
			}
			if _, err := f.s.Get(ctx, tc.id); err == nil {
				t.Fatal("the redelivery was parked again")
			}
		})
	}
	if z, m := f.counts(t); z != 0 || m != 0 {
		t.Fatalf("store holds z %d m %d, want empty", z, m)
	}
}

// TestTombstoneNewMessageSameID: a new message reusing an explicit x-delay-id after the
// first was delivered is parked (another source id); a late redelivery of the first then
// neither parks nor replaces it. A redelivery of a still-parked explicit-id message keeps
// the entry (no new version, due not counted again).
func TestTombstoneNewMessageSameID(t *testing.T) {
	f := setup(t, func(c *Config) { c.TombstoneTTL = time.Minute })
	ctx := t.Context()
	f.park(t, sourced("order-7", "js:IN:10", true))
	f.deliver(t, "order-7")

	next := sourced("order-7", "js:IN:11", true)
	next.Delay = time.Hour
	if p := f.park(t, next); p[0].Existed || p[0].Delivered {
		t.Fatalf("new message with a delivered id: %+v, want parked", p[0])
	}
	parked, err := f.s.Get(ctx, "order-7")
	if err != nil || parked.Envelope.SourceID != "js:IN:11" {
		t.Fatalf("get: %+v %v", parked, err)
	}
	if p := f.park(t, sourced("order-7", "js:IN:10", true)); !p[0].Delivered {
		t.Fatalf("late redelivery of the delivered message: %+v, want Delivered", p[0])
	}
	again := next
	again.Delay = 2 * time.Hour
	if p := f.park(t, again); !p[0].Existed || p[0].Delivered || p[0].Due != parked.Due {
		t.Fatalf("redelivery of the parked message: %+v, want kept with due %d", p[0], parked.Due)
	}
	if m, err := f.s.Get(ctx, "order-7"); err != nil || m.Version != parked.Version || m.Due != parked.Due {
		t.Fatalf("after the redeliveries: %+v %v, want version %d due %d", m, err, parked.Version, parked.Due)
	}
	// A different message with the id still replaces it (x-delay-id reschedules).
	other := sourced("order-7", "js:IN:12", true)
	if p := f.park(t, other); !p[0].Existed || p[0].Delivered || p[0].Due == parked.Due {
		t.Fatalf("another message with the id: %+v, want replaced", p[0])
	}
}

// TestTombstoneOnlyWithSourceID: messages without a source id (core requests, the message
// API) leave no tombstone and are parked again; a negative TTL turns tombstones off.
func TestTombstoneOnlyWithSourceID(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		src  string
	}{
		{"no source id", time.Minute, ""},
		{"tombstones off", -1, "js:IN:5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, func(c *Config) { c.TombstoneTTL = tc.ttl })
			f.park(t, sourced("m-1", tc.src, true))
			f.deliver(t, "m-1")
			if n, sets := f.tombstones(t, "m-1"); n != 0 || sets != 0 || f.rdb.Exists(t.Context(), f.tombKey("m-1"), f.tombKey("m-1")+"b").Val() != 0 {
				t.Fatalf("tombstone keys exist")
			}
			if p := f.park(t, sourced("m-1", tc.src, true)); p[0].Delivered || p[0].Existed {
				t.Fatalf("park after delivery: %+v, want parked", p[0])
			}
		})
	}
}

// TestTombstoneCancel: a cancelled message with a source id leaves a tombstone, so its
// redelivery is not parked (and delivered despite the cancel).
func TestTombstoneCancel(t *testing.T) {
	f := setup(t, func(c *Config) { c.TombstoneTTL = time.Minute })
	req := sourced("js:IN:3", "js:IN:3", false)
	req.Delay = time.Hour
	f.park(t, req)
	if ok, err := f.s.Cancel(t.Context(), "js:IN:3"); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if p := f.park(t, req); !p[0].Delivered {
		t.Fatalf("redelivery of a cancelled message: %+v, want Delivered", p[0])
	}
	if ok, err := f.s.Cancel(t.Context(), "js:IN:3"); err != nil || ok {
		t.Fatalf("second cancel: %v %v", ok, err)
	}
}

// TestTombstoneExpiryAndPruning: a tombstone absorbs a park for at least the TTL and no
// longer than 1.5 x TTL; its bucket set then expires by itself (Redis deletes it: no
// sweeper) and leaves the index. Tombstones an earlier version wrote (the ZSET t) still
// absorb a park while live, and every ack removes at most twice as many expired ones as it
// deleted entries, oldest first, until the set is gone.
func TestTombstoneExpiryAndPruning(t *testing.T) {
	const ttl = 400 * time.Millisecond
	f := setup(t, func(c *Config) { c.TombstoneTTL = ttl })
	ctx := t.Context()
	ids := idsOnShard(f.s, 0, 20, "js:IN")
	tz := f.tombKey(ids[0])
	deliverAll := func(ids []string) {
		t.Helper()
		var reqs []ParkRequest
		for _, id := range ids {
			reqs = append(reqs, sourced(id, id, false))
		}
		f.park(t, reqs...)
		var rs []Receipt
		for len(rs) < len(ids) {
			c, err := f.s.Claim(ctx, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range c.Messages {
				rs = append(rs, m.Receipt)
			}
		}
		if a, err := f.s.Ack(ctx, rs); err != nil || a.N != len(ids) {
			t.Fatalf("ack: %+v %v", a, err)
		}
	}
	// Tombstones of an earlier version: 9 expired, ids[19]'s live.
	now := f.now(t)
	for i, id := range ids[10:19] {
		f.rdb.ZAdd(ctx, tz, redis.Z{Score: float64(now - 100 + int64(i)), Member: id})
	}
	f.rdb.ZAdd(ctx, tz, redis.Z{Score: float64(now + time.Minute.Milliseconds()), Member: ids[19]})

	deliverAll(ids[:10])
	if n, _ := f.tombstones(t, ids[0]); n != 10 {
		t.Fatalf("%d tombstones after 10 deliveries, want 10", n)
	}
	// The ack pruned at most 2 x 10 of the earlier version's expired ones: all 9.
	if n := f.rdb.ZCard(ctx, tz).Val(); n != 1 {
		t.Fatalf("%d tombstones left in the earlier version's set, want the live one", n)
	}
	if p := f.park(t, sourced(ids[0], ids[0], false)); !p[0].Delivered {
		t.Fatalf("redelivery within the TTL: %+v, want Delivered", p[0])
	}
	if p := f.park(t, sourced(ids[19], ids[19], false)); !p[0].Delivered {
		t.Fatalf("redelivery with an earlier version's live tombstone: %+v, want Delivered", p[0])
	}
	if p := f.park(t, sourced(ids[18], ids[18], false)); p[0].Delivered {
		t.Fatalf("an earlier version's expired tombstone absorbed a park: %+v", p[0])
	}
	time.Sleep(ttl + ttl/2 + 50*time.Millisecond) // let the buckets expire (Redis clock)

	// Expired: ids[1] is parked again; the bucket set is gone, and the index forgets it
	// at the next write.
	if p := f.park(t, sourced(ids[1], ids[1], false)); p[0].Delivered {
		t.Fatalf("redelivery after 1.5 x TTL: %+v, want parked", p[0])
	}
	if n, sets := f.tombstones(t, ids[0]); n != 0 || sets != 0 {
		t.Fatalf("%d tombstones in %d sets after they expired", n, sets)
	}
	if _, err := f.s.Cancel(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if n := f.rdb.ZCard(ctx, tz+"b").Val(); n != 1 {
		t.Fatalf("index holds %d buckets, want the cancel's one", n)
	}
	if f.tombstone(t, ids[1], ids[1]) == 0 {
		t.Fatal("no tombstone of the cancel")
	}
}

// TestTombstoneFormat1Entry: an entry parked by the previous version (body format 1, no
// source id) is claimed, decoded and acked as before; it leaves no tombstone.
func TestTombstoneFormat1Entry(t *testing.T) {
	f := setup(t, func(c *Config) { c.TombstoneTTL = time.Minute })
	ctx := t.Context()
	id := "js:IN:99"
	sh := f.s.ShardOf(id)
	body := "\x01\x0fnats:orders.out\x0dnats:delay.in\x00\x01\x01a\x011payload"
	now := f.now(t)
	if err := f.rdb.HSet(ctx, f.s.keys[sh].m, id, fmt.Sprintf("5,0,%d,%s", now, body)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.ZAdd(ctx, f.s.keys[sh].z, redis.Z{Score: float64(now), Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
	c, _ := f.claimID(t, id, 5*time.Second)
	if c.Version != 5 || c.Envelope.Target != "nats:orders.out" || string(c.Envelope.Payload) != "payload" || c.Envelope.SourceID != "" {
		t.Fatalf("format 1 entry claimed as %+v", c)
	}
	if a, err := f.s.Ack(ctx, []Receipt{c.Receipt}); err != nil || a.N != 1 {
		t.Fatalf("ack: %+v %v", a, err)
	}
	if n, _ := f.tombstones(t, id); n != 0 {
		t.Fatal("a format 1 entry left a tombstone")
	}
}
