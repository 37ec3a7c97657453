package delaystore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

func TestParseQuotaRules(t *testing.T) {
	rules, err := ParseQuotaRules(" tenant-a.*=100000, kafka:billing.*=5 ,")
	if err != nil || len(rules) != 2 || rules[0] != (QuotaRule{"tenant-a.*", 100000}) || rules[1] != (QuotaRule{"kafka:billing.*", 5}) {
		t.Fatalf("rules %+v, %v", rules, err)
	}
	if r, err := ParseQuotaRules(""); r != nil || err != nil {
		t.Fatalf("empty: %v %v", r, err)
	}
	for _, bad := range []string{"a.*", "=5", "a.*=0", "a.*=-1", "a.*=x", "a.*=5/s", "[=5", "a.*=1000000000001", "a=1,a=2", "a.*=99999999999999999999"} {
		if _, err := ParseQuotaRules(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if ps := (Config{KeyPrefix: "d", Shards: 1, Lease: time.Second, TargetQuota: "x=0"}).Validate(); len(ps) != 1 || !strings.Contains(ps[0].Error(), "TARGET_QUOTA") {
		t.Fatalf("Validate: %v", ps)
	}
}

// quotaReq is a park request for target with a fresh id.
func quotaReq(id, target string) ParkRequest {
	return ParkRequest{ID: id, Delay: time.Hour, Envelope: Envelope{Target: target, Source: "nats:delay.in", Payload: []byte("x")}}
}

// quotaUse is a pattern's use: the messages parked against it fleet-wide, and s's limit
// for it and refusals of it.
type quotaUse struct {
	Parked, Limit int64
	Rejected      uint64
}

// usage returns the use of pattern.
func usage(t *testing.T, s *Store, pattern string) quotaUse {
	t.Helper()
	parked, err := s.QuotaParked(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	u := quotaUse{Parked: parked[pattern]}
	for i, r := range s.QuotaRules() {
		if r.Pattern == pattern {
			u.Limit, u.Rejected = r.Limit, s.QuotaRejected()[i]
		}
	}
	return u
}

// parkCount parks reqs and counts parked (new) and over-quota results.
func parkCount(t *testing.T, s *Store, reqs ...ParkRequest) (parked, over int) {
	t.Helper()
	res, err := s.Park(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		switch {
		case r.OverQuota:
			over++
		case !r.Existed:
			parked++
		}
	}
	return parked, over
}

// The quota holds per pattern over its targets (first match, a pattern without ":" on
// both brokers), in one batch and across batches; targets of no pattern are not limited;
// an existing id (idempotent redelivery) or a replace within the same pattern is not
// refused at the limit; a replace by a target of another full pattern is, and keeps the
// entry.
func TestQuotaPark(t *testing.T) {
	f := setup(t, func(c *Config) { c.TargetQuota = "orders.*=5,billing.*=1" })
	var reqs []ParkRequest
	for i := range 8 {
		reqs = append(reqs, quotaReq(fmt.Sprintf("o%d", i), fmt.Sprintf("nats:orders.t%d", i%3)))
	}
	res := f.park(t, reqs...)
	var in []ParkRequest // the parked ones
	for i, r := range res {
		if !r.OverQuota {
			in = append(in, reqs[i])
		}
	}
	if len(in) != 5 {
		t.Fatalf("8 in one batch over a quota of 5: %d parked: %+v", len(in), res)
	}
	if p, o := parkCount(t, f.s, quotaReq("o9", "kafka:orders.x")); p != 0 || o != 1 {
		t.Fatalf("a kafka target of the full pattern: %d parked, %d over", p, o)
	}
	var free []ParkRequest
	for i := range 50 {
		free = append(free, quotaReq(fmt.Sprintf("f%d", i), "nats:other"))
	}
	if p, o := parkCount(t, f.s, free...); p != 50 || o != 0 {
		t.Fatalf("a target of no pattern: %d parked, %d over", p, o)
	}
	// A redelivery keeps a parked one, a replace to another orders target too.
	again := in[0]
	replace := quotaReq(in[1].ID, "nats:orders.zzz")
	replace.Replace = true
	res = f.park(t, again, replace)
	if !res[0].Existed || res[0].OverQuota || !res[1].Existed || res[1].OverQuota || res[1].Due == 0 {
		t.Fatalf("redelivery and same-pattern replace at the limit: %+v", res)
	}
	if p, o := parkCount(t, f.s, quotaReq("b1", "nats:billing.x")); p != 1 || o != 0 {
		t.Fatalf("billing: %d %d", p, o)
	}
	// in[2] -> billing (full): refused, it stays an orders message.
	move := quotaReq(in[2].ID, "nats:billing.y")
	move.Replace = true
	if res := f.park(t, move); !res[0].OverQuota || res[0].Existed {
		t.Fatalf("replace into a full pattern: %+v", res)
	}
	if m, err := f.s.Get(t.Context(), in[2].ID); err != nil || m.Envelope.Target != in[2].Envelope.Target {
		t.Fatalf("%s after the refused replace: %+v %v", in[2].ID, m, err)
	}
	if u := usage(t, f.s, "orders.*"); u.Parked != 5 || u.Limit != 5 || u.Rejected != 4 {
		t.Fatalf("orders usage %+v", u)
	}
	if u := usage(t, f.s, "billing.*"); u.Parked != 1 || u.Rejected != 1 {
		t.Fatalf("billing usage %+v", u)
	}
	// A replace that moves a message out of a pattern frees its place.
	out := quotaReq(in[3].ID, "nats:other")
	out.Replace = true
	f.park(t, out)
	if u := usage(t, f.s, "orders.*"); u.Parked != 4 {
		t.Fatalf("after moving o3 out: %+v", u)
	}
	if p, o := parkCount(t, f.s, quotaReq("o10", "nats:orders.q"), quotaReq("o11", "nats:orders.q")); p != 1 || o != 1 {
		t.Fatalf("after moving o3 out: %d parked, %d over", p, o)
	}
}

// A cancel, a delivery (ack), a bulk cancel and a dead letter (acked like a delivery)
// free quota at once: the next park is admitted.
func TestQuotaFreedAtOnce(t *testing.T) {
	f := setup(t, func(c *Config) { c.TargetQuota = "q.*=3" })
	parkCount(t, f.s, quotaReq("a", "nats:q.a"), quotaReq("b", "nats:q.b"), quotaReq("c", "nats:q.c"))
	full := func(id string) {
		t.Helper()
		if p, o := parkCount(t, f.s, quotaReq(id, "nats:q.x")); p != 0 || o != 1 {
			t.Fatalf("%s at the limit: %d parked, %d over", id, p, o)
		}
	}
	admitted := func(id string) {
		t.Helper()
		if p, o := parkCount(t, f.s, quotaReq(id, "nats:q.x")); p != 1 || o != 0 {
			t.Fatalf("%s after a place was freed: %d parked, %d over", id, p, o)
		}
	}
	full("x1")
	if ok, err := f.s.Cancel(t.Context(), "a"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	admitted("x1")
	full("x2")

	// Delivery: b due now, claimed and acked.
	now := quotaReq("b", "nats:q.b")
	now.Replace, now.Delay = true, 0
	f.park(t, now)
	m, _ := f.claimID(t, "b", 5*time.Second)
	if a, err := f.s.Ack(t.Context(), []Receipt{m.Receipt}); err != nil || a.N != 1 {
		t.Fatal(a, err)
	}
	admitted("x2")
	full("x3")

	// Bulk cancel of the q.x target: x1 and x2.
	if n := f.changeAll(t, BulkOp{Kind: BulkCancel}, func(e Scanned) bool { return e.Target == "nats:q.x" }); n != 2 {
		t.Fatalf("bulk cancel changed %d, want 2", n)
	}
	if u := usage(t, f.s, "q.*"); u.Parked != 1 {
		t.Fatalf("after the bulk cancel: %+v", u)
	}
	admitted("x3")
	admitted("x4")
	full("x5")
	// The mapping of a target with no message left in a shard is forgotten.
	var left int64
	for _, k := range f.s.keys {
		left += f.rdb.HLen(t.Context(), k.qt).Val()
	}
	if want := int64(2); left > want+2 { // c, x (per shard at most one field each)
		t.Fatalf("%d target mappings left for 2 targets", left)
	}
}

// Replicas (stores on one Redis) parking concurrently leave exactly the quota parked:
// the check is in the script that parks.
func TestQuotaConcurrentReplicas(t *testing.T) {
	url := testredis.URL(t)
	prefix := testredis.Prefix(t)
	const replicas, total, limit = 4, 5000, 1000
	stores := make([]*Store, replicas)
	for i := range stores {
		opt, _ := redis.ParseURL(url)
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		s, err := New(rdb, Config{KeyPrefix: prefix, Shards: 16, Lease: 30 * time.Second, TargetQuota: fmt.Sprintf("tenant-a.*=%d", limit)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Init(t.Context()); err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	parked, over := quotaFlood(t, stores, total)
	if parked != limit || over != total-limit {
		t.Fatalf("%d parks over %d replicas with a quota of %d: %d parked, %d over", total, replicas, limit, parked, over)
	}
	var z int64
	for _, k := range stores[0].keys {
		z += stores[0].rdb.ZCard(t.Context(), k.z).Val()
	}
	if z != limit {
		t.Fatalf("%d entries in Redis, want %d", z, limit)
	}
	if u := usage(t, stores[0], "tenant-a.*"); u.Parked != limit {
		t.Fatalf("usage %+v", u)
	}
}

// quotaFlood parks total messages to tenant-a targets from every store at once, in
// batches of 50, and counts the parked and over-quota results.
func quotaFlood(t *testing.T, stores []*Store, total int) (parked, over int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(stores))
	per := total / len(stores)
	for r, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < per; b += 50 {
				var reqs []ParkRequest
				for i := b; i < b+50 && i < per; i++ {
					reqs = append(reqs, quotaReq(fmt.Sprintf("r%d-%d", r, i), fmt.Sprintf("nats:tenant-a.t%d", i%7)))
				}
				res, err := s.Park(context.Background(), reqs)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, x := range res {
					if x.OverQuota {
						over++
					} else if !x.Existed {
						parked++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return parked, over
}

// A pattern added to a store that holds messages counts them (Init counts again when
// the pattern list changed), and a replica of an earlier configuration (no quota) keeps
// the counts exact: its acks and cancels subtract what the mapping counted.
func TestQuotaConfigChange(t *testing.T) {
	url := testredis.URL(t)
	prefix := testredis.Prefix(t)
	open := func(quota string) *Store {
		opt, _ := redis.ParseURL(url)
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		s, err := New(rdb, Config{KeyPrefix: prefix, Shards: 4, Lease: 30 * time.Second, TargetQuota: quota})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Init(t.Context()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	old := open("")
	var reqs []ParkRequest
	for i := range 10 {
		reqs = append(reqs, quotaReq(fmt.Sprintf("m%d", i), "nats:a.x"))
	}
	parkCount(t, old, reqs...)
	limited := open("a.*=8")
	if u := usage(t, limited, "a.*"); u.Parked != 10 {
		t.Fatalf("after adding the pattern: %+v, want the 10 parked counted", u)
	}
	if p, o := parkCount(t, limited, quotaReq("n1", "nats:a.y")); o != 1 || p != 0 {
		t.Fatalf("over the new quota: %d %d", p, o)
	}
	for i := range 4 {
		if ok, err := old.Cancel(t.Context(), fmt.Sprintf("m%d", i)); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if u := usage(t, limited, "a.*"); u.Parked != 6 {
		t.Fatalf("after 4 cancels by the replica without quota: %+v", u)
	}
	// The replica without the pattern parks to a target it has mapped (a.x): counted.
	if p, o := parkCount(t, old, quotaReq("n2", "nats:a.x")); p != 1 || o != 0 {
		t.Fatalf("the replica without quota parks: %d %d", p, o)
	}
	if u := usage(t, limited, "a.*"); u.Parked != 7 {
		t.Fatalf("after a park by the replica without quota: %+v", u)
	}
	if p, o := parkCount(t, limited, quotaReq("n3", "nats:a.x"), quotaReq("n4", "nats:a.x")); p != 1 || o != 1 {
		t.Fatalf("at 7 of 8: %d parked, %d over", p, o)
	}
	// A limit raised needs no count; a pattern removed drops the counts.
	raised := open("a.*=100")
	if u := usage(t, raised, "a.*"); u.Parked != 8 || u.Limit != 100 {
		t.Fatalf("raised: %+v", u)
	}
	none := open("")
	if parked, err := none.QuotaParked(t.Context()); err != nil || len(parked) != 0 || len(none.QuotaRules()) != 0 {
		t.Fatalf("after removing the pattern: %+v %v", parked, err)
	}
}

// On Redis Cluster each shard counts against its share of the limit, in its own slot: a
// flood from 4 replicas leaves exactly the quota parked, and a cancel frees a place.
func TestQuotaCluster(t *testing.T) {
	c := testredis.StartCluster(t, testredis.ClusterOptions{})
	prefix := testredis.Prefix(t)
	const replicas, total, limit = 4, 5000, 1000
	stores := make([]*Store, replicas)
	for i := range stores {
		s, err := New(c.Client(t), Config{KeyPrefix: prefix, Shards: 16, Lease: 30 * time.Second, TargetQuota: fmt.Sprintf("tenant-a.*=%d", limit)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Init(t.Context()); err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	for i, k := range stores[0].keys {
		if k.qc != fmt.Sprintf("{%s:%d}:q", prefix, i) || testredis.KeySlot(k.qc) != testredis.KeySlot(k.z) {
			t.Fatalf("shard %d counter %s not in the shard's slot", i, k.qc)
		}
	}
	parked, over := quotaFlood(t, stores, total)
	if parked != limit || over != total-limit {
		t.Fatalf("cluster: %d parked, %d over, want %d and %d", parked, over, limit, total-limit)
	}
	if u := usage(t, stores[1], "tenant-a.*"); u.Parked != limit {
		t.Fatalf("usage %+v", u)
	}
	// Free one place: a message of the same shard is admitted, the place is not double-used.
	id := "r0-0"
	if ok, err := stores[2].Cancel(t.Context(), id); !ok || err != nil {
		t.Fatalf("cancel %s: %v %v", id, ok, err)
	}
	sh := stores[0].ShardOf(id)
	next := idsOnShard(stores[0], sh, 2, "again")
	if p, o := parkCount(t, stores[3], quotaReq(next[0], "nats:tenant-a.q"), quotaReq(next[1], "nats:tenant-a.q")); p != 1 || o != 1 {
		t.Fatalf("after a cancel on the cluster: %d parked, %d over", p, o)
	}
	// A pattern list changed counts every shard again in its own slot.
	s, err := New(c.Client(t), Config{KeyPrefix: prefix, Shards: 16, Lease: 30 * time.Second, TargetQuota: "tenant-*=5000,x=1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	if u := usage(t, s, "tenant-*"); u.Parked != limit {
		t.Fatalf("recounted on the cluster: %+v", u)
	}
}

// The dev mode's miniredis (gopher-lua) runs the quota scripts too: park refuses over the
// quota, a cancel frees a place, a changed pattern list is counted again.
func TestQuotaMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	open := func(quota string) *Store {
		return miniredisStore(t, mr, Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute, TargetQuota: quota})
	}
	s := open("t.*=2")
	if p, o := parkCount(t, s, quotaReq("a", "nats:t.x"), quotaReq("b", "nats:t.y"), quotaReq("c", "nats:t.x"), quotaReq("d", "nats:u")); p != 3 || o != 1 {
		t.Fatalf("miniredis: %d parked, %d over", p, o)
	}
	if ok, err := s.Cancel(t.Context(), "a"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if p, o := parkCount(t, s, quotaReq("e", "nats:t.z")); p != 1 || o != 0 {
		t.Fatalf("miniredis after a cancel: %d parked, %d over", p, o)
	}
	if u := usage(t, open("x=1,t.*=5"), "t.*"); u.Parked != 2 {
		t.Fatalf("miniredis recount: %+v", u)
	}
}
