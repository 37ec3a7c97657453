package delaystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// fixture is a Store on a fresh key prefix plus a raw client for inspection.
type fixture struct {
	s      *Store
	rdb    *redis.Client
	prefix string
}

func newFixture(t testing.TB, url string, mutate ...func(*Config)) *fixture {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testredis.Prefix(t)
	cfg := Config{KeyPrefix: prefix, Shards: 4, Lease: 30 * time.Second}
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &fixture{s: s, rdb: rdb, prefix: prefix}
}

func setup(t *testing.T, mutate ...func(*Config)) *fixture {
	t.Helper()
	return newFixture(t, testredis.URL(t), mutate...)
}

// replica is a second Store over the fixture's Redis and prefix (another replica), which
// has read the store's layout (Init) and knows none of its interned names yet.
func (f *fixture) replica(t *testing.T) *Store {
	t.Helper()
	s, err := New(f.rdb, Config{KeyPrefix: f.prefix, Shards: f.s.Shards(), Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// ownServer is a fixture on a redis-server of its own, which the test may stop, fill or
// flush, and that server.
func ownServer(t *testing.T, mutate ...func(*Config)) (*fixture, *testredis.Server) {
	t.Helper()
	srv := testredis.Start(t)
	return newFixture(t, srv.URL(), mutate...), srv
}

// firstResync fails t unless the first wake-up on c (within 5 s) is a resync, as every
// new subscription's is.
func firstResync(t *testing.T, c <-chan Wake) {
	t.Helper()
	if w := nextWake(t, c, 5*time.Second); w.Shard != WakeResync {
		t.Fatalf("first wake %+v, want resync", w)
	}
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

// counts sums ZCARD and HLEN over all shards.
func (f *fixture) counts(t *testing.T) (z, m int64) {
	t.Helper()
	for i := range f.s.Shards() {
		tag := fmt.Sprintf("{%s:%d}", f.prefix, i)
		z += f.rdb.ZCard(t.Context(), tag+":z").Val()
		m += f.rdb.HLen(t.Context(), tag+":m").Val()
	}
	return z, m
}

func (f *fixture) park(t testing.TB, reqs ...ParkRequest) []Parked {
	t.Helper()
	p, err := f.s.Park(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// claimID polls Claim on id's shard until id is claimed or the deadline passes; every claim
// is checked for early messages.
func (f *fixture) claimID(t *testing.T, id string, within time.Duration) (Claimed, Claim) {
	t.Helper()
	sh := f.s.ShardOf(id)
	deadline := time.Now().Add(within)
	for attempt := 0; attempt == 0 || time.Now().Before(deadline); attempt++ {
		c, err := f.s.Claim(t.Context(), sh, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			if c.Now < m.Due {
				t.Fatalf("claimed %s early: now %d < due %d", m.ID, c.Now, m.Due)
			}
			if m.ID == id {
				return m, c
			}
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	t.Fatalf("%s not claimed within %s", id, within)
	return Claimed{}, Claim{}
}

// idsOnShard returns n ids that map to shard.
func idsOnShard(s *Store, shard, n int, tag string) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("%s-%d", tag, i)
		if s.ShardOf(id) == shard {
			ids = append(ids, id)
		}
	}
	return ids
}

func sampleEnvelope(i int) Envelope {
	return Envelope{
		Target:  "nats:orders.timeout",
		Source:  "nats:delay.in",
		Headers: headers.List{{Key: "a", Value: "1"}, {Key: "b", Value: fmt.Sprint(i)}, {Key: "a", Value: "2"}},
		Key:     []byte{},
		Payload: []byte{0, 1, 2, 0xff, ',', byte(i)},
	}
}

func TestNewValidation(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	ok := Config{KeyPrefix: "delay", Shards: 16, Lease: time.Second}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"valid bounds", func(c *Config) { c.Shards = 4096; c.Lease = time.Millisecond }, ""},
		{"empty prefix", func(c *Config) { c.KeyPrefix = "" }, "KEY_PREFIX: must not be empty"},
		{"brace in prefix", func(c *Config) { c.KeyPrefix = "a{b" }, "must not contain { or }"},
		{"closing brace in prefix", func(c *Config) { c.KeyPrefix = "a}" }, "must not contain { or }"},
		{"zero shards", func(c *Config) { c.Shards = 0 }, "SHARDS: 0: must be 1 to 4096"},
		{"too many shards", func(c *Config) { c.Shards = 4097 }, "SHARDS: 4097: must be 1 to 4096"},
		{"short lease", func(c *Config) { c.Lease = time.Microsecond }, "LEASE: 1µs: must be at least 1ms"},
		{"prefix with a space", func(c *Config) { c.KeyPrefix = "a b" }, "must not contain whitespace"},
		{"negative min replicas", func(c *Config) { c.MinReplicas = -1 }, "REDIS_MIN_REPLICAS: -1: must be >= 0"},
		{"wait timeout under 1ms", func(c *Config) { c.MinReplicas = 1; c.WaitTimeout = time.Microsecond }, "REDIS_WAIT_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.mutate(&cfg)
			_, err := New(rdb, cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestShardOf(t *testing.T) {
	// Pinned values: the mapping must never change.
	tests := []struct {
		id     string
		shards int
		want   int
	}{
		{"", 16, int(2166136261 % 16)},
		{"a", 16, int(0xe40c292c % 16)},
		{"order-1", 1, 0},
		{"x", 0, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%d", tt.id, tt.shards), func(t *testing.T) {
			if got := ShardOf(tt.id, tt.shards); got != tt.want {
				t.Fatalf("ShardOf = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParkValidation(t *testing.T) {
	f := setup(t)
	tests := []struct {
		name    string
		req     ParkRequest
		wantErr string
	}{
		{"empty id", ParkRequest{}, "empty id"},
		{"negative delay", ParkRequest{ID: "x", Delay: -time.Millisecond}, "negative delay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.s.Park(t.Context(), []ParkRequest{{ID: "ok"}, tt.req})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
	if z, m := f.counts(t); z != 0 || m != 0 {
		t.Fatalf("an invalid batch wrote %d/%d entries", z, m)
	}
	if p, err := f.s.Park(t.Context(), nil); err != nil || p != nil {
		t.Fatalf("empty park = %v, %v", p, err)
	}
}

func TestParkClaim(t *testing.T) {
	f := setup(t)
	tests := []struct {
		name     string
		req      ParkRequest
		wantDue  func(before, after int64) (lo, hi int64)
		claimNow bool
	}{
		{"no delay", ParkRequest{}, func(b, a int64) (int64, int64) { return b, a }, true},
		{"sub-millisecond delay rounds up", ParkRequest{Delay: 1500 * time.Microsecond},
			func(b, a int64) (int64, int64) { return b + 2, a + 2 }, false},
		{"delay 120ms", ParkRequest{Delay: 120 * time.Millisecond},
			func(b, a int64) (int64, int64) { return b + 120, a + 120 }, false},
		{"absolute in the past", ParkRequest{Absolute: true, At: 1000},
			func(int64, int64) (int64, int64) { return 1000, 1000 }, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			req.ID = fmt.Sprintf("park-claim-%d", i)
			req.Envelope = sampleEnvelope(i)
			before := f.now(t)
			p := f.park(t, req)
			after := f.now(t)
			lo, hi := tt.wantDue(before, after)
			if len(p) != 1 || p[0].ID != req.ID || p[0].Existed || p[0].Due < lo || p[0].Due > hi {
				t.Fatalf("parked %+v, want due in [%d, %d]", p, lo, hi)
			}
			within := 3 * time.Second
			if tt.claimNow {
				within = time.Nanosecond // one attempt
			}
			m, c := f.claimID(t, req.ID, within)
			if m.Due != p[0].Due || m.Attempts != 0 || m.Version < 1 || m.Shard != f.s.ShardOf(req.ID) {
				t.Fatalf("claimed %+v", m)
			}
			if want := c.Now + 30_000 + (c.Now+30_000)%2; m.Token != want {
				t.Fatalf("token %d, want now+lease made even %d", m.Token, want)
			}
			if c.Next != m.Token {
				t.Fatalf("next head %d, want the lease expiry %d", c.Next, m.Token)
			}
			if !reflect.DeepEqual(m.Envelope, req.Envelope) {
				t.Fatalf("envelope:\n got %#v\nwant %#v", m.Envelope, req.Envelope)
			}
			a, err := f.s.Ack(t.Context(), []Receipt{m.Receipt})
			if err != nil || a.N != 1 {
				t.Fatalf("ack = %+v, %v", a, err)
			}
		})
	}
}

func TestAbsoluteFarFuture(t *testing.T) {
	f := setup(t)
	const at = 4102444800123 // 2100-01-01, well above 1e12: must not be formatted as 4.1e+12
	p := f.park(t, ParkRequest{ID: "future", Absolute: true, At: at, Envelope: sampleEnvelope(1)})
	if p[0].Due != at {
		t.Fatalf("due %d, want %d", p[0].Due, at)
	}
	m, err := f.s.Get(t.Context(), "future")
	if err != nil || m.Due != at {
		t.Fatalf("get = %+v, %v", m, err)
	}
	score := f.rdb.ZScore(t.Context(), fmt.Sprintf("{%s:%d}:z", f.prefix, f.s.ShardOf("future")), "future").Val()
	if int64(score) != at {
		t.Fatalf("score %v, want %d", score, at)
	}
}

func TestNeverEarly(t *testing.T) {
	f := setup(t)
	const n = 40
	var reqs []ParkRequest
	for i := range n {
		reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("early-%d", i), Delay: 300 * time.Millisecond, Envelope: sampleEnvelope(i)})
	}
	parked := f.park(t, reqs...)
	due := map[string]int64{}
	for _, p := range parked {
		due[p.ID] = p.Due
	}
	got := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		for sh := range f.s.Shards() {
			c, err := f.s.Claim(t.Context(), sh, 7)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range c.Messages {
				if c.Now < m.Due || m.Due != due[m.ID] {
					t.Fatalf("%s claimed at %d, due %d (parked due %d)", m.ID, c.Now, m.Due, due[m.ID])
				}
				if got[m.ID] {
					t.Fatalf("%s claimed twice", m.ID)
				}
				got[m.ID] = true
			}
		}
		time.Sleep(2 * time.Millisecond) // poll interval
	}
	if len(got) != n {
		t.Fatalf("claimed %d of %d", len(got), n)
	}
}

func TestIdempotentPark(t *testing.T) {
	f := setup(t)
	first := f.park(t, ParkRequest{ID: "dup", Delay: time.Hour, Envelope: sampleEnvelope(1)})[0]
	t.Run("keep", func(t *testing.T) {
		again := f.park(t, ParkRequest{ID: "dup", Delay: 2 * time.Hour, Envelope: sampleEnvelope(2)})[0]
		if !again.Existed || again.Due != first.Due {
			t.Fatalf("second park %+v, first %+v", again, first)
		}
		if z, m := f.counts(t); z != 1 || m != 1 {
			t.Fatalf("counts %d/%d, want 1/1", z, m)
		}
		msg, err := f.s.Get(t.Context(), "dup")
		if err != nil || !reflect.DeepEqual(msg.Envelope, sampleEnvelope(1)) || msg.Due != first.Due {
			t.Fatalf("get = %+v, %v", msg, err)
		}
	})
	t.Run("same id twice in one batch", func(t *testing.T) {
		tests := []struct {
			name       string
			preexist   bool
			second     ParkRequest
			wantFirst  bool // Existed of the first request
			wantEnv    int  // sampleEnvelope index stored at the end
			sameDue    bool // the second reports the first's due
			finalIsNew bool // the stored due is the second's
		}{
			{"new then keep", false, ParkRequest{Delay: time.Hour}, false, 3, true, false},
			{"new then replace", false, ParkRequest{Replace: true, Delay: time.Hour}, false, 4, false, true},
			{"existing, replace then keep", true, ParkRequest{Delay: 2 * time.Hour}, true, 3, true, false},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				id := fmt.Sprintf("batch-dup-%d", i)
				if tt.preexist {
					f.park(t, ParkRequest{ID: id, Delay: 3 * time.Hour, Envelope: sampleEnvelope(9)})
				}
				first := ParkRequest{ID: id, Replace: tt.preexist, Envelope: sampleEnvelope(3)}
				second := tt.second
				second.ID, second.Envelope = id, sampleEnvelope(4)
				if !second.Replace {
					second.Envelope = sampleEnvelope(5) // never stored
				}
				p := f.park(t, first, second)
				if p[0].Existed != tt.wantFirst || !p[1].Existed || (p[0].Due == p[1].Due) != tt.sameDue {
					t.Fatalf("parked %+v", p)
				}
				msg, err := f.s.Get(t.Context(), id)
				if err != nil || !reflect.DeepEqual(msg.Envelope, sampleEnvelope(tt.wantEnv)) {
					t.Fatalf("get = %+v, %v", msg, err)
				}
				want := p[0].Due
				if tt.finalIsNew {
					want = p[1].Due
				}
				if msg.Due != want {
					t.Fatalf("stored due %d, want %d", msg.Due, want)
				}
				score := f.rdb.ZScore(t.Context(), fmt.Sprintf("{%s:%d}:z", f.prefix, f.s.ShardOf(id)), id).Val()
				if int64(score) != want {
					t.Fatalf("score %v, want %d", score, want)
				}
			})
		}
	})
	t.Run("replace fences the old claim", func(t *testing.T) {
		f.park(t, ParkRequest{ID: "rep", Envelope: sampleEnvelope(5)})
		old, _ := f.claimID(t, "rep", time.Second)
		before := f.now(t)
		p := f.park(t, ParkRequest{ID: "rep", Replace: true, Delay: time.Hour, Envelope: sampleEnvelope(6)})[0]
		if !p.Existed || p.Due < before+3_600_000 {
			t.Fatalf("replaced %+v", p)
		}
		a, err := f.s.Ack(t.Context(), []Receipt{old.Receipt})
		if err != nil || a.N != 0 {
			t.Fatalf("stale ack = %+v, %v", a, err)
		}
		msg, err := f.s.Get(t.Context(), "rep")
		if err != nil || msg.Version <= old.Version || msg.Due != p.Due || !reflect.DeepEqual(msg.Envelope, sampleEnvelope(6)) {
			t.Fatalf("after stale ack: %+v, %v (old version %d)", msg, err, old.Version)
		}
		r, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: old.Receipt}})
		if err != nil || r.N != 0 {
			t.Fatalf("stale retry = %+v, %v", r, err)
		}
	})
}

func TestConcurrentClaims(t *testing.T) {
	f := setup(t)
	const n, workers = 2000, 8
	for b := 0; b < n; b += 500 {
		var reqs []ParkRequest
		for i := b; i < b+500; i++ {
			reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("c-%d", i), Envelope: sampleEnvelope(i)})
		}
		f.park(t, reqs...)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for sh := w; ctx.Err() == nil; sh++ {
				mu.Lock()
				done := total == n
				mu.Unlock()
				if done {
					return
				}
				c, err := f.s.Claim(ctx, sh%f.s.Shards(), 37)
				if err != nil {
					errs <- err
					return
				}
				var rs []Receipt
				mu.Lock()
				for _, m := range c.Messages {
					seen[m.ID]++
					total++
					rs = append(rs, m.Receipt)
				}
				mu.Unlock()
				if a, err := f.s.Ack(ctx, rs); err != nil || a.N != len(rs) {
					errs <- fmt.Errorf("ack %d: %+v, %v", len(rs), a, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != n || total != n {
		t.Fatalf("claimed %d distinct, %d total, want %d", len(seen), total, n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s claimed %d times", id, c)
		}
	}
	if z, m := f.counts(t); z != 0 || m != 0 {
		t.Fatalf("left %d/%d entries", z, m)
	}
}

func TestLeaseExpiry(t *testing.T) {
	f := setup(t, func(c *Config) { c.Lease = 200 * time.Millisecond })
	f.park(t, ParkRequest{ID: "lease", Envelope: sampleEnvelope(1)})
	first, c1 := f.claimID(t, "lease", time.Second)
	if want := c1.Now + 200 + (c1.Now+200)%2; first.Token != want { // claim tokens are even ("In delivery")
		t.Fatalf("token %d, want %d", first.Token, want)
	}
	c, err := f.s.Claim(t.Context(), first.Shard, 10)
	if err != nil || len(c.Messages) != 0 {
		t.Fatalf("claimed again under the lease: %+v, %v", c, err)
	}
	second, c2 := f.claimID(t, "lease", 3*time.Second)
	if c2.Now < first.Token || second.Token <= first.Token || second.Version != first.Version {
		t.Fatalf("second claim %+v at %d, first %+v", second, c2.Now, first)
	}
	if a, err := f.s.Ack(t.Context(), []Receipt{first.Receipt}); err != nil || a.N != 0 {
		t.Fatalf("stale ack = %+v, %v", a, err)
	}
	a, err := f.s.Ack(t.Context(), []Receipt{second.Receipt})
	if err != nil || a.N != 1 || a.Heads[second.Shard] != -1 {
		t.Fatalf("ack = %+v, %v", a, err)
	}
}

func TestRetryAndAck(t *testing.T) {
	f := setup(t)
	f.park(t, ParkRequest{ID: "r", Envelope: sampleEnvelope(1)}, ParkRequest{ID: "other", Delay: time.Hour})
	m, c1 := f.claimID(t, "r", time.Second)
	r, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Backoff: 300 * time.Millisecond}})
	if err != nil || r.N != 1 {
		t.Fatalf("retry = %+v, %v", r, err)
	}
	head := r.Heads[m.Shard]
	if head < c1.Now+300 {
		t.Fatalf("retry head %d, want >= %d", head, c1.Now+300)
	}
	if again, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt}}); err != nil || again.N != 0 {
		t.Fatalf("second retry with the same receipt = %+v, %v", again, err)
	}
	got, err := f.s.Get(t.Context(), "r")
	if err != nil || got.Attempts != 1 || got.Due != m.Due || got.Version != m.Version {
		t.Fatalf("get after retry = %+v, %v", got, err)
	}
	m2, c2 := f.claimID(t, "r", 3*time.Second)
	if c2.Now < head || m2.Attempts != 1 || !reflect.DeepEqual(m2.Envelope, sampleEnvelope(1)) {
		t.Fatalf("reclaimed %+v at %d, head %d", m2, c2.Now, head)
	}
	a, err := f.s.Ack(t.Context(), []Receipt{m2.Receipt})
	if err != nil || a.N != 1 {
		t.Fatalf("ack = %+v, %v", a, err)
	}
	if z, h := f.counts(t); z != 1 || h != 1 { // only "other" is left
		t.Fatalf("counts %d/%d, want 1/1", z, h)
	}
	if _, err := f.s.Get(t.Context(), "r"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after ack: %v", err)
	}
	if _, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Backoff: -1}}); err == nil {
		t.Fatal("negative backoff accepted")
	}
	if _, err := f.s.Ack(t.Context(), []Receipt{{ID: "x", Shard: 99}}); err == nil {
		t.Fatal("shard out of range accepted")
	}
}

func TestAckBatchAcrossShards(t *testing.T) {
	f := setup(t)
	var reqs []ParkRequest
	for i := range 50 {
		reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("b-%d", i)})
	}
	f.park(t, reqs...)
	var rs []Receipt
	for sh := range f.s.Shards() {
		c, err := f.s.Claim(t.Context(), sh, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			rs = append(rs, m.Receipt)
		}
	}
	if len(rs) != 50 {
		t.Fatalf("claimed %d", len(rs))
	}
	a, err := f.s.Ack(t.Context(), append(rs, rs[0])) // a duplicate receipt applies once
	if err != nil || a.N != 50 || len(a.Heads) != f.s.Shards() {
		t.Fatalf("ack = %+v, %v", a, err)
	}
	for sh, h := range a.Heads {
		if h != -1 {
			t.Fatalf("shard %d head %d, want -1", sh, h)
		}
	}
}

func TestCancelGet(t *testing.T) {
	f := setup(t)
	f.park(t, ParkRequest{ID: "c", Delay: time.Hour, Envelope: sampleEnvelope(7)})
	f.park(t, ParkRequest{ID: "claimed", Envelope: sampleEnvelope(8)})
	claimed, _ := f.claimID(t, "claimed", time.Second)
	// A claimed message is in delivery: not cancelled, kept, and its ack goes through.
	if ok, err := f.s.Cancel(t.Context(), "claimed"); ok || !errors.Is(err, ErrInDelivery) {
		t.Fatalf("cancel of a claimed message = %v, %v; want ErrInDelivery", ok, err)
	}
	if _, err := f.s.Get(t.Context(), "claimed"); err != nil {
		t.Fatalf("get after a cancel in delivery: %v", err)
	}
	if a, err := f.s.Ack(t.Context(), []Receipt{claimed.Receipt}); err != nil || a.N != 1 {
		t.Fatalf("ack after a cancel in delivery = %+v, %v", a, err)
	}
	tests := []struct {
		id      string
		found   bool
		existed bool
	}{
		{"c", true, true},
		{"unknown", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			m, err := f.s.Get(t.Context(), tt.id)
			if tt.found {
				if err != nil || m.ID != tt.id || m.Shard != f.s.ShardOf(tt.id) || m.Version < 1 {
					t.Fatalf("get = %+v, %v", m, err)
				}
			} else if !errors.Is(err, ErrNotFound) {
				t.Fatalf("get err = %v, want ErrNotFound", err)
			}
			ok, err := f.s.Cancel(t.Context(), tt.id)
			if err != nil || ok != tt.existed {
				t.Fatalf("cancel = %v, %v", ok, err)
			}
			if _, err := f.s.Get(t.Context(), tt.id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get after cancel: %v", err)
			}
			if ok, err := f.s.Cancel(t.Context(), tt.id); err != nil || ok {
				t.Fatalf("second cancel = %v, %v", ok, err)
			}
		})
	}
	if z, m := f.counts(t); z != 0 || m != 0 {
		t.Fatalf("counts %d/%d", z, m)
	}
	if _, err := f.s.Cancel(t.Context(), ""); err == nil {
		t.Fatal("empty id accepted")
	}
}

func TestStatsHeads(t *testing.T) {
	f := setup(t)
	st, err := f.s.Stats(t.Context())
	if err != nil || st.Parked != 0 || st.NextDue != -1 || len(st.PerShard) != 4 || st.Now <= 0 {
		t.Fatalf("empty stats = %+v, %v", st, err)
	}
	var reqs []ParkRequest
	for i := range 10 {
		reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("s-%d", i), Absolute: true, At: int64(5_000_000_000_000 + i)})
	}
	parked := f.park(t, reqs...)
	st, err = f.s.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	want := make([]int64, 4)
	wantHeads := []int64{-1, -1, -1, -1}
	for _, p := range parked {
		sh := f.s.ShardOf(p.ID)
		want[sh]++
		if wantHeads[sh] == -1 || p.Due < wantHeads[sh] {
			wantHeads[sh] = p.Due
		}
	}
	for _, n := range st.PerShard {
		sum += n
	}
	if st.Parked != 10 || sum != 10 || !reflect.DeepEqual(st.PerShard, want) || st.NextDue != 5_000_000_000_000 {
		t.Fatalf("stats = %+v, want per shard %v", st, want)
	}
	heads, now, err := f.s.Heads(t.Context(), allShards(4))
	if err != nil || !reflect.DeepEqual(heads, wantHeads) || now.UnixMilli() < st.Now {
		t.Fatalf("heads = %v, %v, %v; want %v", heads, now, err, wantHeads)
	}
	// Some shards only, aligned with the argument.
	sub, _, err := f.s.Heads(t.Context(), []int{3, 0, 3})
	if want := []int64{wantHeads[3], wantHeads[0], wantHeads[3]}; err != nil || !reflect.DeepEqual(sub, want) {
		t.Fatalf("heads of [3 0 3] = %v, %v; want %v", sub, err, want)
	}
	if _, _, err := f.s.Heads(t.Context(), []int{-1}); err == nil {
		t.Fatal("heads of shard -1")
	}
}

func TestShardMismatch(t *testing.T) {
	url := testredis.URL(t)
	f := newFixture(t, url, func(c *Config) { c.Shards = 16 })
	same, err := New(f.rdb, Config{KeyPrefix: f.prefix, Shards: 16, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := same.Init(t.Context()); err != nil {
		t.Fatalf("same count: %v", err)
	}
	other, err := New(f.rdb, Config{KeyPrefix: f.prefix, Shards: 8, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = other.Init(t.Context())
	if !errors.Is(err, ErrShardMismatch) {
		t.Fatalf("err = %v, want ErrShardMismatch", err)
	}
	for _, s := range []string{"16", "8"} { // bridge names BRIDGE_SHARDS (TestNameVariables)
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not name %s", err, s)
		}
	}
}

// TestEvictionPolicy (docs/faults.md B9): Init refuses an allkeys-* policy, which would evict
// parked messages, and accepts noeviction and volatile-* (parked messages have no TTL), with
// a warning for volatile-* (a compact store's tombstone sets have one).
func TestEvictionPolicy(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	for _, tc := range []struct {
		policy string
		ok     bool
	}{{"noeviction", true}, {"volatile-lru", true}, {"allkeys-lru", false}, {"allkeys-random", false}} {
		if err := rdb.ConfigSet(t.Context(), "maxmemory-policy", tc.policy).Err(); err != nil {
			t.Fatal(err)
		}
		var logged strings.Builder
		s, err := New(rdb, Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: time.Second},
			WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Init(t.Context())
		if warned := strings.Contains(logged.String(), "policy="+tc.policy); warned != strings.HasPrefix(tc.policy, "volatile-") {
			t.Errorf("%s: warned = %v; log: %s", tc.policy, warned, logged.String())
		}
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.policy, err)
		}
		if !tc.ok && (!errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), tc.policy)) {
			t.Errorf("%s: err = %v, want ErrEvictionPolicy naming the policy", tc.policy, err)
		}
	}
}

func TestClaimCorrupt(t *testing.T) {
	f := setup(t)
	id := "bad"
	tag := fmt.Sprintf("{%s:%d}", f.prefix, f.s.ShardOf(id))
	f.rdb.HSet(t.Context(), tag+":m", id, string(binaryHeader(5, 0, 1000))+"\x09garbage")
	f.rdb.ZAdd(t.Context(), tag+":z", redis.Z{Score: 1000, Member: id})
	f.park(t, ParkRequest{ID: "good", Envelope: sampleEnvelope(1)})
	c, err := f.s.Claim(t.Context(), f.s.ShardOf(id), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Corrupt) != 1 || c.Corrupt[0].ID != id || c.Corrupt[0].Version != 5 {
		t.Fatalf("corrupt = %+v", c.Corrupt)
	}
	if _, err := f.s.Get(t.Context(), id); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("get err = %v", err)
	}
	// Put back (as egress re-scores one whose dead letter failed): no longer in delivery.
	if _, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: c.Corrupt[0].Receipt, Backoff: time.Hour, PutBack: true}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.s.Cancel(t.Context(), id); !ok || err != nil {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	// A member without envelope is dropped by claim.
	f.rdb.ZAdd(t.Context(), tag+":z", redis.Z{Score: 1000, Member: "orphan"})
	c, err = f.s.Claim(t.Context(), f.s.ShardOf(id), 10)
	if err != nil || len(c.Messages)+len(c.Corrupt) != 0 {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	if f.rdb.ZScore(t.Context(), tag+":z", "orphan").Err() != redis.Nil {
		t.Fatal("orphan member kept")
	}
}

// nextWake reads one wake-up or fails after the deadline.
func nextWake(t *testing.T, ch <-chan Wake, within time.Duration) Wake {
	t.Helper()
	select {
	case w, ok := <-ch:
		if !ok {
			t.Fatal("wake channel closed")
		}
		return w
	case <-time.After(within):
		t.Fatalf("no wake-up within %s", within)
		return Wake{}
	}
}

// allShards returns 0..n-1.
func allShards(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestWakeups(t *testing.T) {
	f := setup(t)
	w, cancel := followingAll(t, f)
	ch := w.C
	ids := idsOnShard(f.s, 2, 3, "w")
	p := f.park(t, ParkRequest{ID: ids[0], Delay: time.Minute})
	if w := nextWake(t, ch, 5*time.Second); w != (Wake{Shard: 2, Due: p[0].Due}) {
		t.Fatalf("wake %+v, want shard 2 due %d", w, p[0].Due)
	}
	f.park(t, ParkRequest{ID: ids[1], Delay: 2 * time.Minute}) // later: no wake
	p = f.park(t, ParkRequest{ID: ids[2], Delay: 30 * time.Second})
	// Pub/sub keeps order: had the later park woken, its wake would come first.
	if w := nextWake(t, ch, 5*time.Second); w != (Wake{Shard: 2, Due: p[0].Due}) {
		t.Fatalf("wake %+v, want shard 2 due %d", w, p[0].Due)
	}
	// A batch wakes once, with its earliest due.
	other := idsOnShard(f.s, 1, 2, "w1")
	p = f.park(t, ParkRequest{ID: other[0], Delay: 50 * time.Second}, ParkRequest{ID: other[1], Delay: 40 * time.Second})
	if w := nextWake(t, ch, 5*time.Second); w != (Wake{Shard: 1, Due: p[1].Due}) {
		t.Fatalf("wake %+v, want shard 1 due %d", w, p[1].Due)
	}
	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				if err := w.Follow(t.Context(), []int{1}); !errors.Is(err, ErrWakeupsClosed) {
					t.Fatalf("follow after the end: %v, want ErrWakeupsClosed", err)
				}
				return
			}
		case <-deadline:
			t.Fatal("wake channel not closed after cancel")
		}
	}
}

// nextWithdrawal returns the next withdrawal on ch (wake-ups of heads are skipped).
func nextWithdrawal(t *testing.T, ch <-chan Wake) Wake {
	t.Helper()
	for {
		if w := nextWake(t, ch, 5*time.Second); w.ID != "" {
			return w
		}
	}
}

// followingAll returns f's Wakeups following its 4 shards, past the first resync, and the
// cancel of its context (called at cleanup too).
func followingAll(t *testing.T, f *fixture) (*Wakeups, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	w, err := f.s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	firstResync(t, w.C)
	if err := w.Follow(ctx, allShards(4)); err != nil {
		t.Fatal(err)
	}
	return w, cancel
}

// After a reconnect go-redis resubscribes every channel; the fleet channel's confirmation
// alone is the resync: one WakeResync, not one per followed shard.
func TestWakeupsResyncOnReconnect(t *testing.T) {
	f, srv := ownServer(t, func(c *Config) { c.Shards = 64 })
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(t.Context())
	w, err := f.s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch := w.C
	firstResync(t, ch)
	if err := w.Follow(ctx, allShards(64)); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Restart(t)
	if w := nextWake(t, ch, 10*time.Second); w.Shard != WakeResync {
		t.Fatalf("wake after reconnect %+v, want resync", w)
	}
	p := f.park(t, ParkRequest{ID: "after-reconnect", Delay: time.Minute})
	if w := nextWake(t, ch, 5*time.Second); w != (Wake{Shard: f.s.ShardOf("after-reconnect"), Due: p[0].Due}) {
		t.Fatalf("wake %+v after reconnect (want the park's; a second resync means one per channel)", w)
	}
	cancel()
	for range ch {
	}
	// No goroutine is left behind.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before Wakeups:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

func TestWakeupsSubscribeError(t *testing.T) {
	f, srv := ownServer(t)
	srv.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := f.s.Wakeups(ctx); err == nil {
		t.Fatal("subscribe to a dead server succeeded")
	}
}

func TestKeysIndependentOfInput(t *testing.T) {
	f := setup(t)
	hostile := []string{"{x}", "}{", "a:b:c", "{" + f.prefix + ":0}:z", "", "\x00\xff", strings.Repeat("k", 1000)}
	var reqs []ParkRequest
	for i, h := range hostile {
		reqs = append(reqs, ParkRequest{
			ID:       fmt.Sprintf("%s-%d", h, i),
			Envelope: Envelope{SourceID: h, Target: "nats:" + h, Source: h, Headers: headers.List{{Key: h, Value: h}}, Key: []byte(h), Payload: []byte(h)},
		})
	}
	reqs = append(reqs, ParkRequest{ID: "later", Delay: time.Hour})
	f.park(t, reqs...)
	f.park(t, ParkRequest{ID: "later", Replace: true, Delay: 2 * time.Hour})
	var rs []RetryRequest
	for sh := range f.s.Shards() {
		c, err := f.s.Claim(t.Context(), sh, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			rs = append(rs, RetryRequest{Receipt: m.Receipt})
		}
	}
	if _, err := f.s.Retry(t.Context(), rs[:2]); err != nil {
		t.Fatal(err)
	}
	var acks []Receipt
	for _, r := range rs[2:] {
		acks = append(acks, r.Receipt)
	}
	if _, err := f.s.Ack(t.Context(), acks); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Cancel(t.Context(), "later"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Stats(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Replica ids are zset members, never key names.
	for i, h := range hostile {
		id := fmt.Sprintf("%s-%d", h, i)
		if len(id) > MaxMemberID {
			id = id[:MaxMemberID]
		}
		if _, err := confirmedBeat(t.Context(), f.s, id, time.Minute, 0, ""); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := f.s.Leave(t.Context(), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	allowed := regexp.MustCompile(`^\{` + regexp.QuoteMeta(f.prefix) + `:[0-3]\}:(z|m|seq|epoch|tn|to|r|n|c|cx|nm)$|^\{` +
		regexp.QuoteMeta(f.prefix) + `:fleet\}:(members|version|pending|tokens)$`)
	var keys []string
	iter := f.rdb.Scan(t.Context(), 0, "*"+f.prefix+"*", 1000).Iterator()
	for iter.Next(t.Context()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no keys found")
	}
	for _, k := range keys {
		if k != f.prefix+":shards" && k != f.prefix+":cursor" && !allowed.MatchString(k) {
			t.Errorf("unexpected key %q", k)
		}
	}
}

func TestCrashSafety(t *testing.T) {
	f, srv := ownServer(t)
	const n = 200
	var reqs []ParkRequest
	for i := range n {
		reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("crash-%d", i), Envelope: sampleEnvelope(i)})
	}
	parked := f.park(t, reqs...)
	srv.Kill()
	srv.Restart(t)
	st, err := f.s.Stats(t.Context())
	if err != nil || st.Parked != n {
		t.Fatalf("after restart: %+v, %v", st, err)
	}
	got := 0
	for sh := range f.s.Shards() {
		c, err := f.s.Claim(t.Context(), sh, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			var i int
			if _, err := fmt.Sscanf(m.ID, "crash-%d", &i); err != nil {
				t.Fatal(err)
			}
			if m.Due != parked[i].Due || !bytes.Equal(m.Envelope.Payload, sampleEnvelope(i).Payload) {
				t.Fatalf("%s changed: %+v", m.ID, m)
			}
			got++
		}
	}
	if got != n {
		t.Fatalf("claimed %d of %d after restart", got, n)
	}
}

func TestScriptCacheFlushed(t *testing.T) {
	f, _ := ownServer(t)
	if err := f.rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	p := f.park(t, ParkRequest{ID: "a"}, ParkRequest{ID: "b"}, ParkRequest{ID: "c"})
	if len(p) != 3 {
		t.Fatalf("parked %+v", p)
	}
	f.rdb.ScriptFlush(t.Context())
	var rs []Receipt
	for sh := range f.s.Shards() {
		c, err := f.s.Claim(t.Context(), sh, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			rs = append(rs, m.Receipt)
		}
	}
	f.rdb.ScriptFlush(t.Context())
	if a, err := f.s.Ack(t.Context(), rs); err != nil || a.N != 3 {
		t.Fatalf("ack = %+v, %v", a, err)
	}
}

// Batches larger than the scripts' chunk size (1000 values per variadic call).
func TestLargeBatch(t *testing.T) {
	f := setup(t, func(c *Config) { c.Shards = 1 })
	const n = 2600
	var reqs []ParkRequest
	for i := range n {
		reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("big-%d", i), Envelope: sampleEnvelope(i)})
	}
	reqs = append(reqs, ParkRequest{ID: "big-7", Delay: time.Hour}) // duplicate: kept
	p := f.park(t, reqs...)
	if len(p) != n+1 || !p[n].Existed || p[n].Due != p[7].Due {
		t.Fatalf("parked %d, last %+v", len(p), p[n])
	}
	c, err := f.s.Claim(t.Context(), 0, n+10)
	if err != nil || len(c.Messages) != n {
		t.Fatalf("claimed %d, %v", len(c.Messages), err)
	}
	for _, m := range c.Messages {
		var i int
		if _, err := fmt.Sscanf(m.ID, "big-%d", &i); err != nil || !reflect.DeepEqual(m.Envelope, sampleEnvelope(i)) {
			t.Fatalf("%s: %+v, %v", m.ID, m.Envelope, err)
		}
	}
	var rs []Receipt
	for _, m := range c.Messages {
		rs = append(rs, m.Receipt)
	}
	a, err := f.s.Ack(t.Context(), append(rs, rs...)) // duplicates apply once
	if err != nil || a.N != n || a.Heads[0] != -1 {
		t.Fatalf("ack = %+v, %v", a.N, err)
	}
	if z, m := f.counts(t); z != 0 || m != 0 {
		t.Fatalf("counts %d/%d", z, m)
	}
}

// TestWakeupsWithdrawals: only a cancel of a recurring message in delivery (claimed)
// withdraws a version on the shard's wake channel (so that a replica holding its firing
// claimed ahead does not publish it): a cancel of a waiting entry and a park that replaces
// a claimed entry (InDelivery: it is still delivered) withdraw nothing; an id with colons
// survives the payload.
func TestWakeupsWithdrawals(t *testing.T) {
	f := setup(t)
	w, _ := followingAll(t, f)
	ids := idsOnShard(f.s, 3, 3, "x:y")

	f.park(t, ParkRequest{ID: ids[0], Replace: true, Delay: time.Minute})
	if ok, err := f.s.Cancel(t.Context(), ids[0]); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	f.park(t, ParkRequest{ID: ids[1], Replace: true})
	if c, err := f.s.Claim(t.Context(), 3, 10); err != nil || len(c.Messages) != 1 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if p := f.park(t, ParkRequest{ID: ids[1], Replace: true, Delay: 2 * time.Minute}); !p[0].InDelivery {
		t.Fatalf("replace of a claimed entry: %+v, want InDelivery", p[0])
	}

	env := sampleEnvelope(2)
	env.Every = "1s"
	f.park(t, ParkRequest{ID: ids[2], Replace: true, Envelope: env})
	m, _ := f.claimID(t, ids[2], time.Second)
	if ok, err := f.s.Cancel(t.Context(), ids[2]); ok || !errors.Is(err, ErrInDelivery) {
		t.Fatalf("cancel of a recurring message in delivery: %v %v", ok, err)
	}
	if got, want := nextWithdrawal(t, w.C), (Wake{Shard: 3, ID: ids[2], Version: m.Version}); got != want {
		t.Fatalf("withdrawal %+v, want %+v (the recurring firing's only)", got, want)
	}

	for _, bad := range []string{"3:x:id", "3:x1:", "3:xv:id", "9:x1:id", "-1:x1:id"} {
		if wk, ok := f.s.parseWake(bad); ok {
			t.Errorf("parseWake(%q) = %+v, want refused", bad, wk)
		}
	}
	q := wakeQueue{due: map[int]int64{}}
	q.add(Wake{Shard: 1, Due: 5})
	for i := range maxWithdrawals + 1 {
		q.add(Wake{Shard: 2, ID: "a", Version: int64(i)})
	}
	if q.len() != maxWithdrawals+1 || q.peek() != (Wake{Shard: 2, ID: "a", Version: 0}) {
		t.Fatalf("queue of %d, first %+v: want the withdrawals first, at most %d, and the wake-up", q.len(), q.peek(), maxWithdrawals)
	}
}
