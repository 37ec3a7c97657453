package delaystore

import (
	"fmt"
	"testing"
	"time"
)

// tombKey is the base name of the tombstone sets of id's shard: tombKey + "n" is the
// newer set, + "o" the older one (tombs.lua).
func (f *fixture) tombKey(id string) string {
	return fmt.Sprintf("{%s:%d}:t", f.prefix, f.s.ShardOf(id))
}

// tombstoned reports whether src has a tombstone in id's shard: in either set.
func (f *fixture) tombstoned(t *testing.T, id, src string) bool {
	t.Helper()
	ctx, tk := t.Context(), f.tombKey(id)
	return f.rdb.SIsMember(ctx, tk+"n", src).Val() || f.rdb.SIsMember(ctx, tk+"o", src).Val()
}

// tombstones counts the tombstones of id's shard.
func (f *fixture) tombstones(t *testing.T, id string) int64 {
	t.Helper()
	ctx, tk := t.Context(), f.tombKey(id)
	return f.rdb.SCard(ctx, tk+"n").Val() + f.rdb.SCard(ctx, tk+"o").Val()
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
// The tombstone is in the newer set, which expires after 2.5 x TTL.
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
			f.deliver(t, tc.id)
			ttl := time.Minute.Milliseconds()
			if !f.rdb.SIsMember(ctx, f.tombKey(tc.id)+"n", tc.src).Val() {
				t.Fatalf("no tombstone of %s in the newer set after the ack", tc.src)
			}
			if pttl := f.rdb.PTTL(ctx, f.tombKey(tc.id)+"n").Val().Milliseconds(); pttl <= 2*ttl || pttl > 2*ttl+ttl/2 {
				t.Fatalf("newer set expires in %d ms, want (2, 2.5] x TTL", pttl)
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
			tk := f.tombKey("m-1")
			if n := f.rdb.Exists(t.Context(), tk, tk+"n", tk+"o").Val(); n != 0 {
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

// TestTombstoneSetsRotate: the tombstones of the first TTL go to the
// newer set; the first ack after the TTL moves that set to the older name and starts a new
// one, and a redelivery of a message delivered before that boundary is still absorbed
// (both sets are checked). The next move drops the older set (its tombstones are then
// 2 x TTL old); a set nobody writes expires by itself after 2.5 x TTL, so every tombstone
// absorbs for at least the TTL and at most 2.5 x TTL, and nothing sweeps.
func TestTombstoneSetsRotate(t *testing.T) {
	const ttl = 400 * time.Millisecond
	f := setup(t, func(c *Config) { c.TombstoneTTL = ttl })
	ctx := t.Context()
	ids := idsOnShard(f.s, 0, 4, "js:IN")
	tk := f.tombKey(ids[0])
	deliver := func(id string) {
		t.Helper()
		f.park(t, sourced(id, id, false))
		f.deliver(t, id)
	}
	absorbed := func(id string) bool {
		t.Helper()
		p := f.park(t, sourced(id, id, false))
		if !p[0].Delivered {
			f.deliver(t, id) // parked again: take it out, leaving a tombstone again
		}
		return p[0].Delivered
	}
	start := time.Now()
	deliver(ids[0])
	if !f.rdb.SIsMember(ctx, tk+"n", ids[0]).Val() || f.rdb.Exists(ctx, tk+"o").Val() != 0 {
		t.Fatal("first tombstone not in the newer set alone")
	}
	time.Sleep(ttl + 50*time.Millisecond)
	deliver(ids[1]) // after the TTL: the newer set moves to the older name
	if !f.rdb.SIsMember(ctx, tk+"o", ids[0]).Val() || !f.rdb.SIsMember(ctx, tk+"n", ids[1]).Val() ||
		f.rdb.SCard(ctx, tk+"n").Val() != 1 {
		t.Fatalf("after the move: older %v, newer %v", f.rdb.SMembers(ctx, tk+"o").Val(), f.rdb.SMembers(ctx, tk+"n").Val())
	}
	if !absorbed(ids[0]) || !absorbed(ids[1]) {
		t.Fatal("a redelivery across the set boundary was parked again")
	}
	time.Sleep(ttl + 50*time.Millisecond)
	deliver(ids[2]) // the second move drops ids[0]'s set
	if f.rdb.SIsMember(ctx, tk+"o", ids[0]).Val() || !f.rdb.SIsMember(ctx, tk+"o", ids[1]).Val() {
		t.Fatalf("after the second move: older %v", f.rdb.SMembers(ctx, tk+"o").Val())
	}
	if time.Since(start) < ttl {
		t.Fatal("test too slow to tell")
	}
	if absorbed(ids[0]) {
		t.Fatal("a tombstone outlived its set")
	}
	if !absorbed(ids[1]) {
		t.Fatal("a tombstone younger than 2 x TTL was dropped")
	}
	// Idle: both sets expire by themselves within 2.5 x TTL of their creation.
	time.Sleep(2*ttl + ttl/2 + 50*time.Millisecond)
	if n := f.rdb.Exists(ctx, tk+"n", tk+"o").Val(); n != 0 {
		t.Fatalf("%d tombstone sets left after 2.5 x TTL idle", n)
	}
	if absorbed(ids[2]) || absorbed(ids[3]) {
		t.Fatal("a tombstone absorbed after its set expired")
	}
}
