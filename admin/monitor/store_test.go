package monitor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// everyShard is an owned func for a replica that owns every shard of store.
func everyShard(store *delaystore.Store) func() []int {
	all := make([]int, store.Shards())
	for i := range all {
		all[i] = i
	}
	return func() []int { return all }
}

func metricsStore(t *testing.T, url string, shards ...int) (*delaystore.Store, redis.UniversalClient) {
	t.Helper()
	n := 3
	if len(shards) > 0 {
		n = shards[0]
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1 // a killed server fails the scrape at once
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: n, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return store, rdb
}

// The store gauges follow what is parked, and a dead Redis gives a scrape with
// delaybridge_store_scrape_error 1 instead of a failed scrape.
func TestStoreCollector(t *testing.T) {
	srv := testredis.Start(t)
	store, rdb := metricsStore(t, srv.URL())
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewStoreCollector(store, everyShard(store), nil))
	now, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	env := delaystore.Envelope{Target: "nats:t", Source: "nats:delay.in", Payload: []byte("x")}
	keyedEnv := env
	keyedEnv.OrderingKey = "order-1"
	if _, err := store.Park(t.Context(), []delaystore.ParkRequest{
		{ID: "overdue", Absolute: true, At: now.UnixMilli() - 7_000, Envelope: env},
		{ID: "soon", Delay: 20 * time.Second, Envelope: env},
		{ID: "later", Delay: 20 * time.Minute, Envelope: env},
		{ID: "tomorrow", Delay: 20 * time.Hour, Envelope: env},
		{ID: "next-week", Delay: 7 * 24 * time.Hour, Envelope: env},
		{ID: "first", Delay: 8 * 24 * time.Hour, Envelope: keyedEnv},  // its key's head
		{ID: "second", Delay: 8 * 24 * time.Hour, Envelope: keyedEnv}, // held by first
	}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP delaybridge_due_messages Messages that fall due within the next 1m, 1h or 24h (not counting overdue ones), sum over the shards this replica owns.
# TYPE delaybridge_due_messages gauge
delaybridge_due_messages{within="1m"} 1
delaybridge_due_messages{within="1h"} 2
delaybridge_due_messages{within="24h"} 3
# HELP delaybridge_held_messages Messages held by the message parked before them with the same ordering key (not claimable until it leaves the store), sum over the shards this replica owns.
# TYPE delaybridge_held_messages gauge
delaybridge_held_messages 1
# HELP delaybridge_overdue_messages Messages past their due time and not being delivered (score at or before the Redis time), plus messages in retry past their due time (retry set), sum over the shards this replica owns.
# TYPE delaybridge_overdue_messages gauge
delaybridge_overdue_messages 1
# HELP delaybridge_parked_messages_all Messages in the delay store (pending and claimed), sum over the shards this replica owns (sum over replicas for the store).
# TYPE delaybridge_parked_messages_all gauge
delaybridge_parked_messages_all 7
# HELP delaybridge_store_scrape_error 1 when this scrape could not read the delay store (Redis unreachable or slower than 500ms): the store gauges are missing.
# TYPE delaybridge_store_scrape_error gauge
delaybridge_store_scrape_error 0
`
	names := []string{"delaybridge_due_messages", "delaybridge_held_messages", "delaybridge_overdue_messages", "delaybridge_parked_messages_all", "delaybridge_store_scrape_error"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// Per shard: the counts add up, and the overdue message's shard shows its age.
	var sum float64
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	overdueShard := store.ShardOf("overdue")
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v, shard := m.GetGauge().GetValue(), m.GetLabel()
			switch mf.GetName() {
			case "delaybridge_parked_messages":
				sum += v
			case "delaybridge_oldest_overdue_seconds":
				isOverdue := shard[0].GetValue() == fmt.Sprint(overdueShard)
				if isOverdue && (v < 7 || v > 60) || !isOverdue && v != 0 {
					t.Fatalf("oldest overdue on shard %s = %v (the 7s-late message is on shard %d)", shard[0].GetValue(), v, overdueShard)
				}
			}
		}
	}
	if sum != 7 {
		t.Fatalf("parked per shard sums to %v, want 7", sum)
	}
	if n := testutil.CollectAndCount(NewStoreCollector(store, everyShard(store), nil), "delaybridge_oldest_overdue_seconds"); n != 3 {
		t.Fatalf("%d oldest-overdue series, want one per shard (3)", n)
	}

	srv.Kill()
	want = `
# HELP delaybridge_store_scrape_error 1 when this scrape could not read the delay store (Redis unreachable or slower than 500ms): the store gauges are missing.
# TYPE delaybridge_store_scrape_error gauge
delaybridge_store_scrape_error 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatalf("scrape with Redis down: %v", err)
	}
}

// A Redis that does not answer (SIGSTOP) costs a scrape storeScrapeTimeout, not more.
func TestStoreCollectorTimeout(t *testing.T) {
	srv := testredis.Start(t)
	store, _ := metricsStore(t, srv.URL())
	c := NewStoreCollector(store, everyShard(store), nil)
	c.timeout = 200 * time.Millisecond
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv.Signal(t, syscall.SIGSTOP)
	defer srv.Signal(t, syscall.SIGCONT)
	start := time.Now()
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("scrape failed: %v", err)
	}
	took := time.Since(start)
	t.Logf("scrape with a stopped Redis took %s", took)
	want := `
# HELP delaybridge_store_scrape_error 1 when this scrape could not read the delay store (Redis unreachable or slower than 500ms): the store gauges are missing.
# TYPE delaybridge_store_scrape_error gauge
delaybridge_store_scrape_error 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "delaybridge_store_scrape_error", "delaybridge_parked_messages_all"); err != nil {
		t.Fatal(err)
	}
	if took > 2*time.Second { // the client's own read timeout is 3s
		t.Fatalf("scrape took %s with a 200ms store timeout", took)
	}
}

// The script histogram counts the store's script calls by name.
func TestScriptTimerMetric(t *testing.T) {
	store, rdb := metricsStore(t, testredis.URL(t))
	reg := prometheus.NewRegistry()
	if err := RegisterScriptTimer(reg, rdb, store); err != nil {
		t.Fatal(err)
	}
	env := delaystore.Envelope{Target: "nats:t", Source: "nats:delay.in"}
	if _, err := store.Park(t.Context(), []delaystore.ParkRequest{{ID: "a", Delay: time.Hour, Envelope: env}, {ID: "b", Delay: time.Hour, Envelope: env}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Cancel(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Heartbeat(t.Context(), "r1", time.Minute, 0, ""); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			counts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	want := map[string]uint64{"park": 1, "cancel": 1, "claim": 0, "ack": 0, "retry": 0, "member": 1}
	for k, v := range want {
		if counts[k] != v {
			t.Fatalf("script counts %v, want %v", counts, want)
		}
	}
}

// With the Redis monitor reporting an outage the scrape does not try Redis; before its
// first PING (errNotPinged) it does.
func TestStoreCollectorRedisDown(t *testing.T) {
	store, _ := metricsStore(t, testredis.URL(t))
	want := func(v string) string {
		return `
# HELP delaybridge_store_scrape_error 1 when this scrape could not read the delay store (Redis unreachable or slower than 500ms): the store gauges are missing.
# TYPE delaybridge_store_scrape_error gauge
delaybridge_store_scrape_error ` + v + "\n"
	}
	for _, c := range []struct {
		err  error
		want string
	}{{errors.New("redis down"), "1"}, {errNotPinged, "0"}, {nil, "0"}} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(NewStoreCollector(store, everyShard(store), func() error { return c.err }))
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want(c.want)), "delaybridge_store_scrape_error"); err != nil {
			t.Fatalf("monitor says %v: %v", c.err, err)
		}
	}
}

// The collector reports the owned shards only, reads at most 16 of them per scrape (least
// recently read first) and the others from their last reading, and forgets shards no
// longer owned.
func TestStoreCollectorOwned(t *testing.T) {
	srv := testredis.Start(t) // its own server: the command counts
	store, rdb := metricsStore(t, srv.URL(), 64)
	ctx := t.Context()
	var mu sync.Mutex
	owned := []int{}
	for sh := 10; sh < 30; sh++ {
		owned = append(owned, sh)
	}
	c := NewStoreCollector(store, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return owned
	}, nil)
	// One message on every shard, two on shard 12.
	env := delaystore.Envelope{Target: "nats:t", Source: "nats:delay.in"}
	perShard := map[int]int{}
	var reqs []delaystore.ParkRequest
	for i := 0; len(perShard) < 64 || perShard[12] < 2; i++ {
		id := fmt.Sprintf("m-%d", i)
		sh := store.ShardOf(id)
		if perShard[sh] >= 1 && (sh != 12 || perShard[sh] >= 2) {
			continue
		}
		perShard[sh]++
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Delay: time.Hour, Envelope: env})
	}
	if _, err := store.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	// scrape collects once and returns the shard label values of delaybridge_parked_messages,
	// the total, and how many shards Redis was asked about (ZCARD calls).
	scrape := func() (shards map[string]float64, total float64, read int) {
		t.Helper()
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(c)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		shards = map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "delaybridge_parked_messages":
					shards[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
				case "delaybridge_parked_messages_all":
					total = m.GetGauge().GetValue()
				}
			}
		}
		return shards, total, zcards(t, rdb)
	}
	// First scrape: the 16 lowest owned shards (none read yet), 17 messages.
	got, total, read := scrape()
	if read != 16 || len(got) != 16 || got["10"] != 1 || got["12"] != 2 || got["25"] != 1 || total != 17 {
		t.Fatalf("first scrape: read %d shards, series %v, total %v; want 16 read (10..25), total 17", read, got, total)
	}
	if _, ok := got["26"]; ok {
		t.Fatal("shard 26 reported before it was read")
	}
	// A new message on shard 12 (read) is seen when 12 is read again, not before.
	extra := ""
	for i := 0; extra == ""; i++ {
		if id := fmt.Sprintf("x-%d", i); store.ShardOf(id) == 12 {
			extra = id
		}
	}
	if _, err := store.Park(ctx, []delaystore.ParkRequest{{ID: extra, Delay: time.Hour, Envelope: env}}); err != nil {
		t.Fatal(err)
	}
	// Second: the 4 never read (26..29) and the 12 least recently read (ties: lower first).
	got, total, read = scrape()
	if read != 16 || len(got) != 20 || got["12"] != 3 || total != 22 {
		t.Fatalf("second scrape: read %d, series %v, total %v; want 16 read, 20 series, shard 12 at 3, total 22", read, got, total)
	}
	// Turns: 22..25 were read once, the others twice. A new message on shard 29: the third
	// scrape reads 22..25 and 10..21 (29 still as last read), the fourth 26..29 first.
	extra = ""
	for i := 0; extra == ""; i++ {
		if id := fmt.Sprintf("y-%d", i); store.ShardOf(id) == 29 {
			extra = id
		}
	}
	if _, err := store.Park(ctx, []delaystore.ParkRequest{{ID: extra, Delay: time.Hour, Envelope: env}}); err != nil {
		t.Fatal(err)
	}
	if got, total, _ = scrape(); got["29"] != 1 || total != 22 {
		t.Fatalf("third scrape: shard 29 at %v, total %v; want its last reading 1, total 22", got["29"], total)
	}
	if got, total, _ = scrape(); got["29"] != 2 || total != 23 {
		t.Fatalf("fourth scrape: shard 29 at %v, total %v; want 2 (least recently read), total 23", got["29"], total)
	}
	// Ownership moves: dropped shards vanish, totals cover the owned ones only.
	mu.Lock()
	owned = []int{12, 40}
	mu.Unlock()
	got, total, read = scrape()
	if read != 2 || len(got) != 2 || got["12"] != 3 || got["40"] != 1 || total != 4 {
		t.Fatalf("after the ownership change: read %d, series %v, total %v; want shards 12 and 40, total 4", read, got, total)
	}
	if len(c.cache) != 2 {
		t.Fatalf("%d shards cached, want the 2 owned", len(c.cache))
	}
	// A replica that owns nothing reads nothing and reports zero.
	mu.Lock()
	owned = nil
	mu.Unlock()
	got, total, read = scrape()
	if read != 0 || len(got) != 0 || total != 0 {
		t.Fatalf("owning nothing: read %d, series %v, total %v", read, got, total)
	}
}

// zcards reads how many ZCARDs Redis ran since CONFIG RESETSTAT.
func zcards(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_zcard:calls="); ok {
			n, err := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
