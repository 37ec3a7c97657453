package admin

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// fixture is an initialised Admin over a store on a fresh key prefix, the store, and a
// raw client for inspection.
type fixture struct {
	a      *Admin
	s      *delaystore.Store
	rdb    *redis.Client
	prefix string
}

func newFixture(t testing.TB, url string, mutate ...func(*delaystore.Config)) *fixture {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	f := &fixture{rdb: rdb, prefix: testredis.Prefix(t)}
	cfg := delaystore.Config{KeyPrefix: f.prefix, Shards: 4, Lease: 30 * time.Second}
	for _, m := range mutate {
		m(&cfg)
	}
	f.s, f.a = f.open(t, cfg)
	return f
}

// open makes and initialises a store with cfg on the fixture's client, and its Admin.
func (f *fixture) open(t testing.TB, cfg delaystore.Config) (*delaystore.Store, *Admin) {
	t.Helper()
	s, err := delaystore.New(f.rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := New(s)
	if err := a.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, a
}

// replica is another replica's Admin over the fixture's Redis and prefix, with the
// operation lease shortened to lease (0: the default).
func (f *fixture) replica(t testing.TB, lease time.Duration) *Admin {
	t.Helper()
	_, a := f.open(t, delaystore.Config{KeyPrefix: f.prefix, Shards: f.s.Shards(), Lease: 30 * time.Second})
	if lease > 0 {
		a.lease, a.renew = lease, lease/3
	}
	return a
}

func setup(t *testing.T, mutate ...func(*delaystore.Config)) *fixture {
	t.Helper()
	return newFixture(t, testredis.URL(t), mutate...)
}

// now returns the Redis server time in unix ms.
func (f *fixture) now(t *testing.T) int64 {
	t.Helper()
	tm, err := f.rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

func (f *fixture) park(t testing.TB, reqs ...delaystore.ParkRequest) []delaystore.Parked {
	t.Helper()
	p, err := f.s.Park(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// counts sums ZCARD and HLEN over all shards.
func (f *fixture) counts(t *testing.T) (z, m int64) {
	t.Helper()
	for i := range f.s.Shards() {
		z += f.rdb.ZCard(t.Context(), f.key(i, "z")).Val()
		m += f.rdb.HLen(t.Context(), f.key(i, "m")).Val()
	}
	return z, m
}

// claimID polls Claim on id's shard until id is claimed or the deadline passes.
func (f *fixture) claimID(t *testing.T, id string, within time.Duration) (delaystore.Claimed, delaystore.Claim) {
	t.Helper()
	return storetest.ClaimID(t, f.s, id, within)
}

// tombstoned reports whether src has a tombstone in id's shard: in either set ({P:s}:tn,
// {P:s}:to).
func (f *fixture) tombstoned(t *testing.T, id, src string) bool {
	t.Helper()
	ctx, sh := t.Context(), f.s.ShardOf(id)
	return f.rdb.SIsMember(ctx, f.key(sh, "tn"), src).Val() || f.rdb.SIsMember(ctx, f.key(sh, "to"), src).Val()
}

// key is the name of key kind of shard sh ("{P:sh}:kind").
func (f *fixture) key(sh int, kind string) string {
	return fmt.Sprintf("{%s:%d}:%s", f.prefix, sh, kind)
}

// idsOnShard returns n ids that map to shard.
func idsOnShard(s *delaystore.Store, shard, n int, tag string) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("%s-%d", tag, i)
		if s.ShardOf(id) == shard {
			ids = append(ids, id)
		}
	}
	return ids
}

func sampleEnvelope(i int) delaystore.Envelope {
	return delaystore.Envelope{
		Target:  "nats:orders.timeout",
		Source:  "nats:delay.in",
		Headers: headers.List{{Key: "a", Value: "1"}, {Key: "b", Value: fmt.Sprint(i)}, {Key: "a", Value: "2"}},
		Key:     []byte{},
		Payload: []byte{0, 1, 2, 0xff, ',', byte(i)},
	}
}

// redisCPU returns the server's used CPU seconds (user + sys) from INFO cpu.
func redisCPU(b *testing.B, f *fixture) float64 {
	info, err := f.rdb.Info(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			var x float64
			_, _ = fmt.Sscan(v, &x)
			total += x
		}
	}
	return total
}
