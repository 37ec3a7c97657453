package admin

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// targetsOf returns Targets as target -> count and target -> next due.
func targetsOf(t *testing.T, f *fixture, recount bool) ([]TargetCount, map[string]int64, map[string]int64) {
	t.Helper()
	ts, err := f.a.Targets(t.Context(), recount, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	counts, dues := map[string]int64{}, map[string]int64{}
	for _, tc := range ts {
		counts[tc.Target], dues[tc.Target] = tc.Parked, tc.NextDue
	}
	return ts, counts, dues
}

// The counts follow every change: park, replace by another target, claim and ack,
// cancel, bulk cancel; a target whose last message went is not listed.
func TestTargetsFollowChanges(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	park := func(id, target string, at int64, replace bool) {
		env := sampleEnvelope(1)
		env.Target = target
		f.park(t, delaystore.ParkRequest{ID: id, Absolute: true, At: at, Replace: replace, Envelope: env})
	}
	for i := range 30 {
		park(fmt.Sprintf("o%d", i), "nats:orders", now+3_600_000+int64(i), false)
	}
	for i := range 10 {
		park(fmt.Sprintf("b%d", i), "kafka:billing", now+7_200_000+int64(i), false)
	}
	park("due", "nats:due", now-1000, false)
	ts, counts, dues := targetsOf(t, f, false)
	if len(ts) != 3 || ts[0].Target != "nats:orders" || ts[1].Target != "kafka:billing" || counts["nats:orders"] != 30 ||
		counts["kafka:billing"] != 10 || counts["nats:due"] != 1 {
		t.Fatalf("after park: %+v", ts)
	}
	if dues["nats:orders"] != now+3_600_000 || dues["kafka:billing"] != now+7_200_000 || dues["nats:due"] != now-1000 {
		t.Fatalf("next dues: %v", dues)
	}
	park("o0", "kafka:billing", now+60_000, true) // replaced by another target
	park("o1", "nats:orders", now+60_000, false)  // kept: no replace
	if _, err := f.s.Cancel(t.Context(), "o2"); err != nil {
		t.Fatal(err)
	}
	claimed, _ := f.claimID(t, "due", time.Second)
	if a, err := f.s.Ack(t.Context(), []delaystore.Receipt{claimed.Receipt}); err != nil || a.N != 1 {
		t.Fatalf("ack: %+v %v", a, err)
	}
	res, err := f.a.Bulk(t.Context(), Selector{Match: func(t string) bool { return t == "kafka:billing" }, DueFrom: now + 7_200_000},
		delaystore.BulkOp{Kind: delaystore.BulkCancel}, false, nil, time.Minute)
	if err != nil || res.Changed != 10 {
		t.Fatalf("bulk cancel: %+v %v", res, err)
	}
	ts, counts, dues = targetsOf(t, f, false)
	if len(ts) != 2 || counts["nats:orders"] != 28 || counts["kafka:billing"] != 1 || dues["kafka:billing"] != now+60_000 {
		t.Fatalf("after the changes: %+v", ts)
	}
	for sh := range f.s.Shards() {
		if f.rdb.HExists(t.Context(), f.key(sh, "n"), "nats:due").Val() {
			t.Fatalf("shard %d still has a field for nats:due", sh)
		}
	}
}

// A store whose counts are missing (written before they were kept) or wrong is counted
// from its entries: missing at the first Targets, wrong with recount.
func TestTargetsCountsAnOldStore(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	for i := range 50 {
		env := sampleEnvelope(i)
		env.Target = []string{"nats:a", "nats:b"}[i%2]
		f.park(t, delaystore.ParkRequest{ID: fmt.Sprintf("m%d", i), Absolute: true, At: now + 60_000, Envelope: env})
	}
	for sh := range f.s.Shards() {
		if err := f.rdb.Del(t.Context(), f.key(sh, "n")).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, counts, _ := targetsOf(t, f, false); counts["nats:a"] != 25 || counts["nats:b"] != 25 || len(counts) != 2 {
		t.Fatalf("an old store: %v", counts)
	}
	if err := f.rdb.HIncrBy(t.Context(), f.key(0, "n"), "nats:a", 7).Err(); err != nil {
		t.Fatal(err)
	}
	if _, counts, _ := targetsOf(t, f, false); counts["nats:a"] != 32 {
		t.Fatalf("the drift is read as it is: %v", counts)
	}
	if _, counts, _ := targetsOf(t, f, true); counts["nats:a"] != 25 || counts["nats:b"] != 25 {
		t.Fatalf("after a recount: %v", counts)
	}
}

// Each target's window is that of the message due at its next due (the earliest over the
// shards), not of a later one; its quota is the first BRIDGE_TARGET_QUOTA pattern that
// matches it ("" for none). A next due left unknown by the work bound has no window.
func TestTargetsWindowAndQuota(t *testing.T) {
	f := setup(t, func(c *delaystore.Config) { c.TargetQuota = "nats:orders.*=5,orders.*=9,billing.*=3" })
	now := f.now(t)
	base := now + 3_600_000
	park := func(id, target string, at int64, window time.Duration) {
		env := sampleEnvelope(1)
		env.Target, env.Window = target, window
		f.park(t, delaystore.ParkRequest{ID: id, Absolute: true, At: at, Envelope: env})
	}
	for i := range 4 { // the earliest has a window, the later ones another or none
		park(fmt.Sprintf("o%d", i), "nats:orders.a", base+int64(i)*60_000, []time.Duration{10 * time.Second, time.Minute, 0, 0}[i])
		park(fmt.Sprintf("k%d", i), "kafka:orders.b", base+int64(i)*60_000, []time.Duration{0, 7 * time.Second, 0, 0}[i])
		park(fmt.Sprintf("x%d", i), "nats:other", base+int64(i)*60_000, []time.Duration{0, 0, 3 * time.Second, 3 * time.Second}[i])
	}
	ts, _, dues := targetsOf(t, f, false)
	got := map[string]TargetCount{}
	for _, tc := range ts {
		got[tc.Target] = tc
	}
	if o := got["nats:orders.a"]; o.Window != 10*time.Second || o.Quota != "nats:orders.*" || o.NextDue < base || o.NextDue > base+10_000 {
		t.Errorf("nats:orders.a: %+v, want window 10s, quota nats:orders.*, next due in [%d, %d]", o, base, base+10_000)
	}
	if k := got["kafka:orders.b"]; k.Window != 0 || k.Quota != "orders.*" || k.NextDue != base {
		t.Errorf("kafka:orders.b: %+v, want no window, quota orders.* (first match)", k)
	}
	if x := got["nats:other"]; x.Window != 0 || x.Quota != "" || dues["nats:other"] != base {
		t.Errorf("nats:other: %+v, want no window, no quota", x)
	}

	// A target seen with a window in one shard and still unseen behind 600 entries of
	// another: its next due is unknown, and so is its window.
	g := setup(t)
	idIn := func(sh int, prefix string, skip int) string {
		for i := 0; ; i++ {
			if id := fmt.Sprintf("%s%d", prefix, i); g.s.ShardOf(id) == sh {
				if skip == 0 {
					return id
				}
				skip--
			}
		}
	}
	parkIn := func(id, target string, at int64, window time.Duration) {
		env := sampleEnvelope(1)
		env.Target, env.Window = target, window
		g.park(t, delaystore.ParkRequest{ID: id, Absolute: true, At: at, Envelope: env})
	}
	parkIn(idIn(0, "rare-", 0), "nats:rare", base, 5*time.Second)
	var reqs []delaystore.ParkRequest
	for i := range 600 {
		env := sampleEnvelope(1)
		env.Target = "nats:common"
		reqs = append(reqs, delaystore.ParkRequest{ID: idIn(1, "c-", i), Absolute: true, At: base + int64(i), Envelope: env})
	}
	g.park(t, reqs...)
	parkIn(idIn(1, "rare-", 0), "nats:rare", base+10_000, 0)
	ts, err := g.a.Targets(t.Context(), false, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range ts {
		if tc.Target == "nats:rare" && (tc.NextDue != 0 || tc.Window != 0) {
			t.Errorf("nats:rare unseen in shard 1: %+v, want next due and window unknown (0)", tc)
		}
	}
	if ts, err = g.a.Targets(t.Context(), false, 1_000_000); err != nil || len(ts) != 2 || ts[1].Target != "nats:rare" || ts[1].Window != 5*time.Second {
		t.Errorf("read to the end: %+v %v, want nats:rare with window 5s", ts, err)
	}
}
