package delaystore

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/headers"
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
// body formats 1-3) are claimed, retried, acked, kept by a redelivery, cancelled, listed,
// shifted and counted by this version's scripts as before (a rolling upgrade leaves them
// in Redis); an entry a script rewrites gets the binary header and keeps its body.
func TestEntriesOfEarlierVersions(t *testing.T) {
	f := setup(t, func(c *Config) { c.TombstoneTTL = time.Minute })
	ctx := t.Context()
	now := f.now(t)

	// Claimed, retried (rewritten with the binary header), claimed again, acked: a tombstone.
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
	if raw == "" || raw[0] != headerBinary || !strings.HasSuffix(raw, legacyBody2) {
		t.Fatalf("retried entry stored as %q", raw)
	}
	c, _ = f.claimID(t, a, 5*time.Second)
	if c.Version != 5 || c.Attempts != 1 || c.Due != now || !reflect.DeepEqual(c.Envelope, withSource(legacyEnvelope, a)) {
		t.Fatalf("retried legacy entry claimed as %+v", c)
	}
	if ap, err := f.s.Ack(ctx, []Receipt{c.Receipt}); err != nil || ap.N != 1 {
		t.Fatalf("ack: %+v %v", ap, err)
	}
	if f.tombstone(t, a, a) == 0 {
		t.Fatal("no tombstone for the acked legacy entry")
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
	if f.tombstone(t, b, "js:IN:8") == 0 {
		t.Fatal("no tombstone for the cancelled legacy entry")
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
