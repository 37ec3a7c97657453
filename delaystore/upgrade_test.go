package delaystore

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// Bodies as the previous version wrote them (formats 1-3, literal bytes, not today's
// encoder), stored with its text header by legacyEntry.
const (
	legacyTail = "\x0fnats:orders.out" + "\x0dnats:delay.in" + "\x00" + // target, source, no key
		"\x02\x01a\x011" + "\x0cx-delay-hops\x011" + // headers
		"payload"
	legacyBody1 = "\x01" + legacyTail
	legacyBody2 = "\x02" + legacyTail
)

// legacyBody3 is a format 3 body with source id src.
func legacyBody3(src string) string { return "\x03" + string(appendString(nil, src)) + legacyTail }

// legacyEnvelope is what the legacy bodies decode to (with the source id of their format).
var legacyEnvelope = Envelope{Target: "nats:orders.out", Source: "nats:delay.in",
	Headers: headers.List{{Key: "a", Value: "1"}, {Key: "x-delay-hops", Value: "1"}}, Payload: []byte("payload")}

// legacyEntry writes id as the previous version parked it: "<version>,0,<due>,<body>",
// scored at due, counted for its target.
func (f *fixture) legacyEntry(t *testing.T, id string, version, due int64, body string) {
	t.Helper()
	k := f.s.keys[f.s.ShardOf(id)]
	if err := f.rdb.HSet(t.Context(), k.m, id, fmt.Sprintf("%d,0,%d,%s", version, due, body)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.ZAdd(t.Context(), k.z, redis.Z{Score: float64(due), Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestEntriesOfEarlierVersions: entries parked by the previous version (text header,
// body formats 1-3) in its store (P:shards "4,p64") are claimed, retried, acked, kept by a
// redelivery, cancelled, listed, shifted and counted by this version's scripts as before
// (a rolling upgrade leaves them in Redis); an entry a script rewrites keeps the text
// header and its body, and tombstones stay in the zset, so the previous version, still
// running beside this one, reads all of it.
func TestEntriesOfEarlierVersions(t *testing.T) {
	f := setupText(t, func(c *Config) { c.TombstoneTTL = time.Minute })
	ctx := t.Context()
	now := f.now(t)

	// Claimed, retried (rewritten with the text header), claimed again, acked: a tombstone.
	a := "js:IN:7"
	f.legacyEntry(t, a, 5, now, legacyBody2)
	c, _ := f.claimID(t, a, 5*time.Second)
	if c.Version != 5 || c.Attempts != 0 || c.Due != now || !reflect.DeepEqual(c.Envelope, withSource(legacyEnvelope, a)) {
		t.Fatalf("legacy entry claimed as %+v", c)
	}
	if ap, err := f.s.Retry(ctx, []RetryRequest{{Receipt: c.Receipt, Backoff: time.Millisecond}}); err != nil || ap.N != 1 {
		t.Fatalf("retry: %+v %v", ap, err)
	}
	raw := f.rdb.HGet(ctx, f.s.keys[f.s.ShardOf(a)].m, a).Val()
	if raw != fmt.Sprintf("5,1,%d,%s", now, legacyBody2) {
		t.Fatalf("retried entry stored as %q", raw)
	}
	c, _ = f.claimID(t, a, 5*time.Second)
	if c.Version != 5 || c.Attempts != 1 || c.Due != now || !reflect.DeepEqual(c.Envelope, withSource(legacyEnvelope, a)) {
		t.Fatalf("retried legacy entry claimed as %+v", c)
	}
	if ap, err := f.s.Ack(ctx, []Receipt{c.Receipt}); err != nil || ap.N != 1 {
		t.Fatalf("ack: %+v %v", ap, err)
	}
	if f.rdb.ZScore(ctx, f.tombKey(a), a).Val() == 0 {
		t.Fatalf("no tombstone for the acked legacy entry")
	}

	// A redelivery of the parked source message (replace, same source id) keeps it; a
	// cancel deletes it and leaves a tombstone.
	b := "order-1"
	f.legacyEntry(t, b, 9, now+time.Hour.Milliseconds(), legacyBody3("js:IN:8"))
	p := f.park(t, ParkRequest{ID: b, Replace: true, Envelope: withSource(legacyEnvelope, "js:IN:8")})
	if !p[0].Existed || p[0].Due != now+time.Hour.Milliseconds() {
		t.Fatalf("redelivery of a legacy entry: %+v", p[0])
	}
	if ok, err := f.s.Cancel(ctx, b); !ok || err != nil {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if f.rdb.ZScore(ctx, f.tombKey(b), "js:IN:8").Val() == 0 {
		t.Fatalf("no tombstone for the cancelled legacy entry")
	}

	// Listed, counted, shifted (rewritten), read back.
	d := "order-2"
	due := now + time.Hour.Milliseconds()
	f.legacyEntry(t, d, 11, due, legacyBody1)
	l, _, err := f.s.List(ctx, ListQuery{Limit: 10}, time.Second)
	if err != nil || len(l) != 1 || l[0].ID != d || l[0].Target != "nats:orders.out" || l[0].Source != "nats:delay.in" ||
		l[0].Due != due || l[0].Size != len("payload") {
		t.Fatalf("list: %+v %v", l, err)
	}
	tc, err := f.s.Targets(ctx, true, 100)
	if err != nil || len(tc) != 1 || tc[0].Target != "nats:orders.out" || tc[0].Parked != 1 {
		t.Fatalf("targets: %+v %v", tc, err)
	}
	sel := Selector{Match: func(string) bool { return true }, ID: d}
	if r, err := f.s.Bulk(ctx, sel, BulkOp{Kind: BulkShift, Shift: time.Minute, MaxDelay: 24 * time.Hour}, false, nil, time.Second); err != nil || r.Changed != 1 {
		t.Fatalf("bulk shift: %+v %v", r, err)
	}
	if raw := f.rdb.HGet(ctx, f.s.keys[f.s.ShardOf(d)].m, d).Val(); !strings.HasSuffix(raw, ","+legacyBody1) || raw[0] == headerBinary {
		t.Fatalf("shifted entry stored as %q", raw)
	}
	m, err := f.s.Get(ctx, d)
	if err != nil || m.Due != due+time.Minute.Milliseconds() || m.Version == 11 || !reflect.DeepEqual(m.Envelope, legacyEnvelope) {
		t.Fatalf("shifted legacy entry: %+v %v", m, err)
	}
}

// TestListSizeCompact: List reports the payload's size of an entry parked by this version
// (binary header, compact body with hops, key and headers).
func TestListSizeCompact(t *testing.T) {
	f := setup(t)
	env := sampleEnvelope(0)
	env.Key = []byte("key")
	env.Headers = headers.List{{Key: "h", Value: "v"}, {Key: "x-delay-hops", Value: "2"}}
	env.Payload = []byte("twelve bytes")
	f.park(t, ParkRequest{ID: "m", Delay: time.Hour, Envelope: env})
	l, _, err := f.s.List(t.Context(), ListQuery{Limit: 10}, time.Second)
	if err != nil || len(l) != 1 || l[0].Size != len(env.Payload) || l[0].Target != env.Target || l[0].Source != env.Source {
		t.Fatalf("list: %+v %v", l, err)
	}
}

// TestStoreFormatByMark: a store created by this version (P:shards "<N>,p64,c1") writes
// compact entries (binary header, body format 4-6) and set tombstones; a store created by
// an earlier version ("<N>,p64", "<N>") goes on writing what that version reads (text
// header, body formats 1-3, zset tombstones) through park, retry and bulk, so that replicas
// of the earlier version still serving it read every entry and see every tombstone.
func TestStoreFormatByMark(t *testing.T) {
	for _, tc := range []struct {
		mark    string
		compact bool
	}{{"", true}, {"4,p64", false}, {"4", false}} {
		t.Run("mark "+tc.mark, func(t *testing.T) {
			f := newMarkedFixture(t, testredis.URL(t), tc.mark, func(c *Config) { c.TombstoneTTL = time.Minute })
			ctx := t.Context()
			raw := func(id string) string { return f.rdb.HGet(ctx, f.s.keys[f.s.ShardOf(id)].m, id).Val() }
			check := func(what, id string) {
				t.Helper()
				v := raw(id)
				st, err := parseStored(v)
				if err != nil {
					t.Fatalf("%s: %q: %v", what, v, err)
				}
				if got := v[0] == headerBinary && st.body[0] >= formatCompactNoSource; got != tc.compact ||
					(!tc.compact && (v[0] < '0' || v[0] > '9' || st.body[0] > formatSource)) {
					t.Fatalf("%s: stored %q, want compact %v", what, v, tc.compact)
				}
			}
			id := "js:IN:5"
			f.park(t, sourced(id, id, false))
			check("parked", id)
			c, _ := f.claimID(t, id, 5*time.Second)
			if r, err := f.s.Retry(ctx, []RetryRequest{{Receipt: c.Receipt, Backoff: time.Millisecond}}); err != nil || r.N != 1 {
				t.Fatalf("retry: %+v %v", r, err)
			}
			check("retried", id)
			sel := Selector{Match: func(string) bool { return true }, ID: id}
			if r, err := f.s.Bulk(ctx, sel, BulkOp{Kind: BulkShift, Shift: -time.Minute, MaxDelay: time.Hour}, false, nil, time.Second); err != nil || r.Changed != 1 {
				t.Fatalf("bulk shift: %+v %v", r, err)
			}
			check("shifted", id)
			f.deliver(t, id)
			tk := f.tombKey(id)
			inZset, inSet := f.rdb.ZScore(ctx, tk, id).Val() > 0, f.rdb.SIsMember(ctx, tk+"n", id).Val()
			if inZset == tc.compact || inSet != tc.compact {
				t.Fatalf("tombstone in zset %v, in set %v; want compact %v", inZset, inSet, tc.compact)
			}
			if p := f.park(t, sourced(id, id, false)); !p[0].Delivered {
				t.Fatalf("redelivery: %+v, want Delivered", p[0])
			}
		})
	}
}
