package delaystore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// late is a park request of id from Kafka partition p (source id kafka:in:<p>:<off>),
// published at ms by its source, replacing (x-delay-id), due in an hour.
func late(id string, p, off int, ms int64) ParkRequest {
	r := sourced(id, fmt.Sprintf("kafka:in:%d:%d", p, off), true)
	r.Delay, r.Published = time.Hour, ms
	return r
}

// TestCancelRememberedAbsorbsOlderPark is issue 24 item 2 at the store: a cancel read
// before the record it cancels (another partition) found nothing; the record, published
// before the cancel (or in its millisecond), arrives later and is not parked; a record
// published after the cancel is parked, and does not clear the memory: an older record
// arriving after it is still absorbed and leaves the newer one as it was.
func TestCancelRememberedAbsorbsOlderPark(t *testing.T) {
	f := setup(t)
	const at = int64(1_700_000_000_000)
	if ok, err := f.s.CancelAt(t.Context(), "o-1", at); err != nil || ok {
		t.Fatalf("cancel of nothing: %v %v", ok, err)
	}
	for i, ms := range []int64{at - 5, at} {
		p := f.park(t, late("o-1", 0, i, ms))
		if !p[0].Cancelled || p[0].Due != 0 || p[0].Delivered {
			t.Fatalf("record published at cancel%+d ms: %+v, want Cancelled", ms-at, p[0])
		}
	}
	if _, err := f.s.Get(t.Context(), "o-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after absorbed parks: %v, want ErrNotFound", err)
	}
	newer := f.park(t, late("o-1", 1, 0, at+1))
	if newer[0].Cancelled || newer[0].Existed || newer[0].Due == 0 {
		t.Fatalf("record published after the cancel: %+v, want parked", newer[0])
	}
	if p := f.park(t, late("o-1", 2, 0, at-1)); !p[0].Cancelled {
		t.Fatalf("older record after the newer one: %+v, want Cancelled", p[0])
	}
	m, err := f.s.Get(t.Context(), "o-1")
	if err != nil || m.Due != newer[0].Due || m.Envelope.SourceID != "kafka:in:1:0" {
		t.Fatalf("the newer record was touched: %+v %v", m, err)
	}
	// Unknown source time (Published 0): never absorbed.
	if p := f.park(t, ParkRequest{ID: "o-1", Replace: true, Delay: time.Hour, Envelope: sampleEnvelope(0)}); p[0].Cancelled {
		t.Fatalf("park without source time: %+v, want parked", p[0])
	}
}

// TestCancelFoundIsRememberedToo: a cancel that deleted the record of one partition still
// absorbs an older record of the id from another partition read after it; a second,
// older cancel read later does not narrow what the first covers.
func TestCancelFoundIsRememberedToo(t *testing.T) {
	f := setup(t)
	const at = int64(1_700_000_000_000)
	f.park(t, late("o-2", 0, 0, at-10))
	if ok, err := f.s.CancelAt(t.Context(), "o-2", at); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if ok, err := f.s.CancelAt(t.Context(), "o-2", at-100); err != nil || ok {
		t.Fatalf("older cancel: %v %v", ok, err)
	}
	if p := f.park(t, late("o-2", 1, 0, at-5)); !p[0].Cancelled {
		t.Fatalf("older record from another partition after a found cancel: %+v, want Cancelled", p[0])
	}
	if p := f.park(t, late("o-2", 1, 1, at+1)); p[0].Cancelled {
		t.Fatalf("record after the cancel: %+v, want parked", p[0])
	}
}

// TestCancelRememberedInBatch: in one park call over several shards, only the messages
// a remembered cancel covers are dropped.
func TestCancelRememberedInBatch(t *testing.T) {
	f := setup(t, func(c *Config) { c.Shards = 4 })
	const at = int64(1_700_000_000_000)
	var reqs []ParkRequest
	for i := range 40 {
		id := fmt.Sprintf("b-%d", i)
		if i%2 == 0 {
			if _, err := f.s.CancelAt(t.Context(), id, at); err != nil {
				t.Fatal(err)
			}
		}
		reqs = append(reqs, late(id, i%3, i, at-1))
	}
	for i, p := range f.park(t, reqs...) {
		if p.Cancelled != (i%2 == 0) {
			t.Fatalf("%s: %+v, want Cancelled %v", reqs[i].ID, p, i%2 == 0)
		}
	}
}

// TestCancelWindowExpires: a remembered cancel absorbs nothing after Config.CancelWindow
// (Redis time since the cancel ran), and cancels prune the expired ones (at most 2 per
// call): the memory stays bounded without a sweeper.
func TestCancelWindowExpires(t *testing.T) {
	const window = 300 * time.Millisecond
	f := setup(t, func(c *Config) { c.CancelWindow = window })
	ctx := t.Context()
	const at = int64(1_700_000_000_000)
	ids := idsOnShard(f.s, 0, 6, "w")
	for _, id := range ids[:4] {
		if _, err := f.s.CancelAt(ctx, id, at); err != nil {
			t.Fatal(err)
		}
	}
	if p := f.park(t, late(ids[0], 0, 0, at-1)); !p[0].Cancelled {
		t.Fatalf("within the window: %+v, want Cancelled", p[0])
	}
	time.Sleep(window + 50*time.Millisecond) // the Redis clock moves on
	if p := f.park(t, late(ids[1], 0, 1, at-1)); p[0].Cancelled {
		t.Fatalf("after the window: %+v, want parked", p[0])
	}
	c, cx := fmt.Sprintf("{%s:0}:c", f.prefix), fmt.Sprintf("{%s:0}:cx", f.prefix)
	if n := f.rdb.HLen(ctx, c).Val(); n != 4 {
		t.Fatalf("%d remembered cancels before pruning, want 4", n)
	}
	if _, err := f.s.CancelAt(ctx, ids[4], at); err != nil { // adds 1, prunes 2
		t.Fatal(err)
	}
	if h, z := f.rdb.HLen(ctx, c).Val(), f.rdb.ZCard(ctx, cx).Val(); h != 3 || z != 3 {
		t.Fatalf("after one cancel: %d remembered, %d in the index, want 3 and 3", h, z)
	}
	if _, err := f.s.CancelAt(ctx, ids[5], at); err != nil {
		t.Fatal(err)
	}
	if h, z := f.rdb.HLen(ctx, c).Val(), f.rdb.ZCard(ctx, cx).Val(); h != 2 || z != 2 {
		t.Fatalf("after two cancels: %d remembered, %d in the index, want 2 and 2 (the live ones)", h, z)
	}
}

func TestCancelWindowValidation(t *testing.T) {
	for _, tc := range []struct {
		d  time.Duration
		ok bool
	}{{0, true}, {time.Millisecond, true}, {MaxCancelWindow, true}, {-time.Second, false}, {MaxCancelWindow + time.Millisecond, false}} {
		ps := Config{KeyPrefix: "p", Shards: 1, Lease: time.Second, CancelWindow: tc.d}.Validate()
		if (len(ps) == 0) != tc.ok {
			t.Errorf("CancelWindow %s: %v, want ok %v", tc.d, ps, tc.ok)
		}
	}
}

// TestCancelKeepsNewerMessage: a cancel read after a message of its id that its source
// published after the cancel (stored with it, Replace) does not delete that message,
// reports false, and is still remembered for older messages. A message without a stored
// source time (no Replace, or none known) is deleted as before.
func TestCancelKeepsNewerMessage(t *testing.T) {
	f := setup(t)
	const at = int64(1_700_000_000_000)
	newer := f.park(t, late("o-3", 0, 0, at+1))
	if ok, err := f.s.CancelAt(t.Context(), "o-3", at); err != nil || ok {
		t.Fatalf("cancel older than the parked message: %v %v, want false", ok, err)
	}
	if m, err := f.s.Get(t.Context(), "o-3"); err != nil || m.Due != newer[0].Due {
		t.Fatalf("the newer message was touched: %+v %v", m, err)
	}
	if p := f.park(t, late("o-3", 1, 0, at-1)); !p[0].Cancelled {
		t.Fatalf("older message after the late cancel: %+v, want Cancelled", p[0])
	}
	if ok, err := f.s.CancelAt(t.Context(), "o-3", at+1); err != nil || !ok {
		t.Fatalf("cancel in the message's millisecond: %v %v, want true", ok, err)
	}
	f.park(t, ParkRequest{ID: "o-4", Delay: time.Hour, Published: at + 1, Envelope: sampleEnvelope(0)})
	if ok, err := f.s.CancelAt(t.Context(), "o-4", at); err != nil || !ok {
		t.Fatalf("cancel of a message parked without Replace: %v %v, want true", ok, err)
	}
	// An operator's cancel (the message API's DELETE) deletes what is parked, even a
	// message whose producer clock runs ahead of Redis's.
	f.park(t, late("o-5", 0, 0, time.Now().Add(time.Hour).UnixMilli()))
	if ok, err := f.s.Cancel(t.Context(), "o-5"); err != nil || !ok {
		t.Fatalf("operator's cancel of a message published 'in the future': %v %v, want true", ok, err)
	}
}

// BenchmarkParkPublished measures park alone (batches of 40 over 16 shards, 100 B
// payloads, x-delay-id, so Replace) without and with a source time: with one, the time
// rides on the mode value and is stored with the entry (_delaybridge_sent). The shards
// hold no remembered cancel (the common case: one ZCARD per shard group), or, with
// cancels, one per id of the batch's shards (an HMGET per group). ns/op is per message.
//
//	go test -run '^$' -bench BenchmarkParkPublished -benchtime 40000x ./delaystore/
func BenchmarkParkPublished(b *testing.B) {
	for _, tc := range []struct {
		name           string
		published      bool
		cancelsPresent bool
	}{{"published=false", false, false}, {"published=true", true, false}, {"published=true/cancels", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			f := newFixture(b, testredis.Start(b, "--appendfsync", "everysec").URL(), func(c *Config) { c.Shards = 16 })
			const batch = 40
			if tc.cancelsPresent {
				for sh := range 16 {
					if _, err := f.s.CancelAt(b.Context(), idsOnShard(f.s, sh, 1, "gone")[0], 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			payload := make([]byte, 100)
			reqs := make([]ParkRequest, batch)
			cpu0 := redisCPU(b, f)
			b.ResetTimer()
			done := 0
			for ; done < b.N; done += batch {
				for i := range reqs {
					reqs[i] = ParkRequest{ID: fmt.Sprintf("order-%d", done+i), Replace: true, Delay: time.Hour,
						Envelope: Envelope{Target: "nats:orders.timeout", Source: "kafka:delay.in",
							SourceID: fmt.Sprintf("kafka:delay.in:%d:%d", i%3, done+i), Payload: payload}}
					if tc.published {
						reqs[i].Published = 1_700_000_000_000 + int64(done+i)
					}
				}
				if _, err := f.s.Park(b.Context(), reqs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((redisCPU(b, f)-cpu0)*1e6/float64(done), "redis-cpu-us/msg")
			mem, err := f.rdb.MemoryUsage(b.Context(), fmt.Sprintf("{%s:0}:m", f.prefix)).Result()
			if err == nil {
				n := f.rdb.HLen(b.Context(), fmt.Sprintf("{%s:0}:m", f.prefix)).Val()
				b.ReportMetric(float64(mem)/float64(max(n, 1)), "m-bytes/entry")
			}
		})
	}
}

// TestReplaceKeepsTheLaterPublish: of two versions of one x-delay-id read out of order (two
// partitions), the one its source published later stays parked: an earlier one read after
// it is kept out (Existed), so that a cancel between them, read late too, deletes only
// what was published before it (fault row K2 lost the record published after its cancel).
func TestReplaceKeepsTheLaterPublish(t *testing.T) {
	f := setup(t)
	later := ParkRequest{ID: "order-7", Replace: true, Published: 1_700_000_000_200, Delay: time.Hour, Envelope: sampleEnvelope(2)}
	earlier := ParkRequest{ID: "order-7", Replace: true, Published: 1_700_000_000_100, Delay: time.Hour, Envelope: sampleEnvelope(1)}
	f.park(t, later)
	if p := f.park(t, earlier); !p[0].Existed {
		t.Fatalf("earlier publish read late: %+v, want kept out (Existed)", p[0])
	}
	if m, err := f.s.Get(t.Context(), "order-7"); err != nil || string(m.Envelope.Payload) != string(later.Envelope.Payload) {
		t.Fatalf("parked %q, %v; want the later publish %q", m.Envelope.Payload, err, later.Envelope.Payload)
	}
	if ok, err := f.s.CancelAt(t.Context(), "order-7", 1_700_000_000_150); err != nil || ok {
		t.Fatalf("cancel between the two publishes: %v, %v; want the later one kept", ok, err)
	}
	newer := ParkRequest{ID: "order-7", Replace: true, Published: 1_700_000_000_300, Delay: time.Hour, Envelope: sampleEnvelope(3)}
	if p := f.park(t, newer); p[0].Existed && p[0].Due == 0 {
		t.Fatalf("a later publish not parked: %+v", p[0])
	}
	if m, err := f.s.Get(t.Context(), "order-7"); err != nil || string(m.Envelope.Payload) != string(newer.Envelope.Payload) {
		t.Fatalf("parked %q, %v; want the newest publish", m.Envelope.Payload, err)
	}
}
