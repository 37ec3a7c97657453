package delaystore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestCluster runs the store on a 3-master Redis Cluster: every script and pipeline works
// (a key outside its shard's hash tag would fail with CROSSSLOT), the shards spread over
// the masters, and wake-ups cross nodes.
func TestCluster(t *testing.T) {
	c := testredis.StartCluster(t, testredis.ClusterOptions{})
	rdb := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := testredis.Prefix(t)
	const shards = 16
	s, err := New(rdb, Config{KeyPrefix: prefix, Shards: shards, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	// A new store on Cluster keeps runs of 64: the shards spread the masters' load too.
	if v := rdb.Get(ctx, s.shardsKey).Val(); v != shardsMark(shards, ClusterShardRun) || v != "16,p64,v1" {
		t.Fatalf("P:shards on Cluster = %q, want 16,p64,v1", v)
	}

	// The shards' keys: one slot per shard, the shards over every master.
	owners := map[string]int{}
	ownerOf := map[int]string{}
	for i := range shards {
		k := s.keys[i]
		slot := testredis.KeySlot(k.z)
		for _, key := range k.park {
			if testredis.KeySlot(key) != slot {
				t.Fatalf("shard %d: keys %v in different slots", i, k.park)
			}
		}
		o, err := c.Owner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		owners[o.Addr()]++
		ownerOf[i] = o.Addr()
	}
	if len(owners) != 3 {
		t.Fatalf("16 shards on %d masters (%v), want 3", len(owners), owners)
	}

	// The dataset check reads one epoch per master, not per shard, and sees one master's
	// FLUSHALL at the next call: exactly that master's shards.
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.ConfigResetStat(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if reset, err := s.CheckDataset(ctx); err != nil || reset != nil {
			t.Fatalf("intact cluster: reset %v, %v", reset, err)
		}
	}
	var mu sync.Mutex
	var masters []*redis.Client
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	gets := 0
	for _, m := range masters {
		gets += cmdCalls(t, m, "get")
	}
	if gets != 4*3 {
		t.Fatalf("4 checks sent %d GETs on 3 masters, want 12", gets)
	}
	flushed := redis.NewClient(&redis.Options{Addr: ownerOf[0]})
	err = flushed.FlushAll(ctx).Err()
	flushed.Close()
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for i := range shards {
		if ownerOf[i] == ownerOf[0] {
			want = append(want, i)
		}
	}
	if reset, err := s.CheckDataset(ctx); err != nil || !slices.Equal(reset, want) {
		t.Fatalf("after FLUSHALL of %s: reset %v, %v; want %v", ownerOf[0], reset, err, want)
	}

	wake, err := s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wake.Close()
	firstResync(t, wake.C)
	if err := wake.Follow(ctx, allShards(shards)); err != nil {
		t.Fatal(err)
	}

	const n = 400
	reqs := make([]ParkRequest, n)
	for i := range reqs {
		env := sampleEnvelope(i) // with a source id: the acks leave tombstones (tombs.lua's sets)
		env.SourceID = fmt.Sprintf("js:IN:%d", i)
		reqs[i] = ParkRequest{ID: fmt.Sprintf("m-%d", i), Replace: true, Envelope: env}
	}
	reqs = append(reqs, ParkRequest{ID: "later", Delay: time.Hour, Envelope: sampleEnvelope(0)})
	if _, err := s.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Park(ctx, reqs[:10]); err != nil { // idempotent again
		t.Fatal(err)
	}
	if w := nextWake(t, wake.C, 5*time.Second); w.Shard < 0 {
		t.Fatalf("wake %+v after park", w)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Parked != n+1 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	if _, _, err := s.Heads(ctx, allShards(shards)); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Get(ctx, "later"); err != nil || m.ID != "later" {
		t.Fatalf("get %+v %v", m, err)
	}
	if ok, err := s.Cancel(ctx, "later"); err != nil || !ok {
		t.Fatalf("cancel %v %v", ok, err)
	}

	var receipts []Receipt
	var retries []RetryRequest
	for sh := range shards {
		cl, err := s.Claim(ctx, sh, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range cl.Messages {
			if i%10 == 0 {
				retries = append(retries, RetryRequest{Receipt: m.Receipt, Backoff: time.Millisecond})
			} else {
				receipts = append(receipts, m.Receipt)
			}
		}
	}
	if len(receipts)+len(retries) != n {
		t.Fatalf("claimed %d of %d", len(receipts)+len(retries), n)
	}
	if a, err := s.Ack(ctx, receipts); err != nil || a.N != len(receipts) {
		t.Fatalf("ack %+v %v", a, err)
	}
	if a, err := s.Retry(ctx, retries); err != nil || a.N != len(retries) {
		t.Fatalf("retry %+v %v", a, err)
	}
	if st, err := s.Stats(ctx); err != nil || st.Parked != int64(len(retries)) {
		t.Fatalf("stats after ack %+v, %v", st, err)
	}
	// Redeliveries of the acked messages meet their tombstones, in sets the scripts name
	// from the shard's tombstone key (same slot, not in KEYS).
	redelivered, err := s.Park(ctx, reqs[:n])
	if err != nil {
		t.Fatal(err)
	}
	absorbed := 0
	for _, p := range redelivered {
		if p.Delivered {
			absorbed++
		}
	}
	if absorbed != len(receipts) {
		t.Fatalf("%d redeliveries absorbed, want the %d acked", absorbed, len(receipts))
	}

	// The fleet's counts: the script's two keys and the overview's reads in the fleet's slot.
	now := time.Now()
	buckets := [2]StatsBucket{{Step: time.Minute, Start: now.Truncate(time.Minute), Expires: now.Add(time.Hour)},
		{Step: time.Hour, Start: now.Truncate(time.Hour), Expires: now.Add(time.Hour)}}
	if err := s.AddStats(ctx, buckets, map[string]int64{"in:parked": n}); err != nil {
		t.Fatal(err)
	}
	slot := testredis.KeySlot(s.fleetKeys[0])
	for _, b := range buckets {
		if testredis.KeySlot(s.statsKey(b)) != slot {
			t.Fatalf("%s is not in the fleet's slot", s.statsKey(b))
		}
	}
	if b, err := s.ReadStats(ctx, buckets[:]); err != nil || b[0]["in:parked"] != n || b[1]["in:parked"] != n {
		t.Fatalf("buckets %v, %v", b, err)
	}
	if _, err := s.LiveMembers(ctx, now); err != nil {
		t.Fatal(err)
	}
	// A bulk change saving its progress, and the audit log, on Cluster: the progress is
	// written with each shard's changes (its own slot), the audit log lives in {P:audit}.
	var ops []ParkRequest
	for i := range 300 {
		env := sampleEnvelope(i)
		env.Target = "nats:cl.op"
		ops = append(ops, ParkRequest{ID: fmt.Sprintf("op-%d", i), Delay: time.Hour, Envelope: env})
	}
	if _, err := s.Park(ctx, ops); err != nil {
		t.Fatal(err)
	}
	var changed int64
	for sh := range s.Shards() {
		page := s.Scan(ctx, []ScanRequest{{Shard: sh, To: math.MaxInt64, Count: 1000}})[0]
		var picks []Pick
		for _, e := range page.Entries {
			if e.Target == "nats:cl.op" {
				picks = append(picks, e.Pick())
			}
		}
		c, err := s.Change(ctx, sh, BulkOp{Kind: BulkShift, Shift: time.Minute, MaxDelay: 24 * time.Hour}, picks,
			&Progress{OpID: "cl-op", Next: "d,,", Counted: len(picks), Keep: time.Hour})
		if err != nil || page.Err != nil || !page.Through {
			t.Fatalf("change of shard %d on Cluster: %+v %v %+v", sh, c, err, page)
		}
		changed += c.N
	}
	saved, err := s.SavedProgress(ctx, []string{"cl-op"}, allShards(s.Shards()))
	if err != nil || changed != 300 || saved[0][0] == "" {
		t.Fatalf("bulk change on Cluster: changed %d, progress %v, %v", changed, saved, err)
	}
	s.ForgetProgress(ctx, "cl-op")
	if _, err := s.AuditAppend(ctx, "cl-op", "{}", "me", time.Minute, time.Hour, 10); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.AuditSet(ctx, "cl-op", "me", AuditState{State: "done", Matched: 300, Changed: 300}); !ok || err != nil {
		t.Fatalf("audit set on Cluster: %v %v", ok, err)
	}
	if p, err := s.AuditRead(ctx, "", 10, time.Hour); err != nil || len(p.Rows) != 1 || p.Rows[0].State != "done" || p.Rows[0].Changed != 300 {
		t.Fatalf("audit log on Cluster: %+v %v", p, err)
	}
}

// TestClusterEvictionPolicy: one master of three with an allkeys-* policy is enough for
// Init to refuse the cluster.
func TestClusterEvictionPolicy(t *testing.T) {
	c := testredis.StartCluster(t, testredis.ClusterOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rdb := c.Client(t)
	for i, master := range c.Nodes {
		one := redis.NewClient(&redis.Options{Addr: master.Addr()})
		err := one.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err()
		one.Close()
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(rdb, Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Init(ctx); !errors.Is(err, ErrEvictionPolicy) {
			t.Fatalf("master %d with allkeys-lru: Init = %v, want ErrEvictionPolicy", i, err)
		}
		one = redis.NewClient(&redis.Options{Addr: master.Addr()})
		err = one.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err()
		one.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
