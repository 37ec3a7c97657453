package delaystore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// tombKey is the tombstone set of id's shard.
func (f *fixture) tombKey(id string) string {
	return fmt.Sprintf("{%s:%d}:t", f.prefix, f.s.ShardOf(id))
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
			exp, err := f.rdb.ZScore(ctx, f.tombKey(tc.id), tc.src).Result()
			if err != nil {
				t.Fatalf("no tombstone of %s after the ack: %v", tc.src, err)
			}
			if ttl := time.Minute.Milliseconds(); int64(exp) < before+ttl || int64(exp) > after+ttl {
				t.Fatalf("tombstone expiry %d not in [%d, %d]", int64(exp), before+ttl, after+ttl)
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
			if n := f.rdb.Exists(t.Context(), f.tombKey("m-1")).Val(); n != 0 {
				t.Fatalf("tombstone key exists")
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

// TestTombstoneExpiryAndPruning: an expired tombstone no longer absorbs a park, and every
// ack removes at most twice as many expired tombstones as it deleted entries, oldest first:
// the set stays bounded without a sweeper, and no ack does unbounded work.
func TestTombstoneExpiryAndPruning(t *testing.T) {
	const ttl = 300 * time.Millisecond
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
	deliverAll(ids[:10])
	if n := f.rdb.ZCard(ctx, tz).Val(); n != 10 {
		t.Fatalf("%d tombstones after 10 deliveries, want 10", n)
	}
	if p := f.park(t, sourced(ids[0], ids[0], false)); !p[0].Delivered {
		t.Fatalf("redelivery within the TTL: %+v, want Delivered", p[0])
	}
	time.Sleep(ttl + 50*time.Millisecond) // let the tombstones expire (Redis clock)

	// Expired: ids[1] is parked again.
	if p := f.park(t, sourced(ids[1], ids[1], false)); p[0].Delivered {
		t.Fatalf("redelivery after the TTL: %+v, want parked", p[0])
	}
	// Cancelled: ids[1]'s tombstone is written again, live now (10: 9 expired, 1 live).
	if _, err := f.s.Cancel(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	// One delivery: +1 live, at most 2 expired removed: 10 + 1 - 2 = 9.
	deliverAll(ids[10:11])
	if n := f.rdb.ZCard(ctx, tz).Val(); n != 9 {
		t.Fatalf("%d tombstones after 1 more delivery, want 9 (2 of 9 expired pruned)", n)
	}
	// Three deliveries: +3, at most 6 of the 7 expired removed: 9 + 3 - 6 = 6.
	deliverAll(ids[11:14])
	if n := f.rdb.ZCard(ctx, tz).Val(); n != 6 {
		t.Fatalf("%d tombstones after 3 more deliveries, want 6 (6 of 7 expired pruned)", n)
	}
	deliverAll(ids[14:20])
	live := f.rdb.ZCount(ctx, tz, fmt.Sprint(f.now(t)+1), "+inf").Val()
	if n := f.rdb.ZCard(ctx, tz).Val(); n != 11 || live != 11 {
		t.Fatalf("%d tombstones (%d live) at the end, want 11 live: ids[1] cancelled and ids[10:20]", n, live)
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
	if n := f.rdb.Exists(ctx, f.tombKey(id)).Val(); n != 0 {
		t.Fatal("a format 1 entry left a tombstone")
	}
}
