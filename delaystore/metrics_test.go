package delaystore

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Observe counts parked, overdue and upcoming messages per shard and measures the oldest
// overdue entry against the Redis clock.
func TestObserve(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	horizons := []time.Duration{time.Minute, time.Hour, 24 * time.Hour}
	// Two overdue messages on shard 1 (10 s and 3 s late); four on shard 2, each due well
	// clear of a horizon's edge.
	late := idsOnShard(f.s, 1, 2, "late")
	future := idsOnShard(f.s, 2, 4, "future")
	f.park(t,
		ParkRequest{ID: late[0], Absolute: true, At: now - 10_000, Envelope: sampleEnvelope(0)},
		ParkRequest{ID: late[1], Absolute: true, At: now - 3_000, Envelope: sampleEnvelope(1)},
		ParkRequest{ID: future[0], Delay: 30 * time.Second, Envelope: sampleEnvelope(2)},
		ParkRequest{ID: future[1], Delay: 30 * time.Minute, Envelope: sampleEnvelope(3)},
		ParkRequest{ID: future[2], Delay: 2 * time.Hour, Envelope: sampleEnvelope(4)},
		ParkRequest{ID: future[3], Delay: 48 * time.Hour, Envelope: sampleEnvelope(5)},
	)
	obs, err := f.s.Observe(t.Context(), allShards(f.s.Shards()), horizons)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.Shards) != f.s.Shards() || obs.Now < now {
		t.Fatalf("observation: %d shards, now %d (before %d)", len(obs.Shards), obs.Now, now)
	}
	s1, s2 := obs.Shards[1], obs.Shards[2]
	if s1.Parked != 2 || s1.Overdue != 2 || !slices.Equal(s1.DueWithin, []int64{0, 0, 0}) {
		t.Fatalf("shard 1 = %+v", s1)
	}
	if age := s1.OldestOverdue; age < 10*time.Second || age > 10*time.Second+time.Duration(obs.Now-now)*time.Millisecond {
		t.Fatalf("shard 1 oldest overdue %s, want 10s + the time since parking", age)
	}
	if s2.Parked != 4 || s2.Overdue != 0 || s2.OldestOverdue != 0 || !slices.Equal(s2.DueWithin, []int64{1, 2, 3}) {
		t.Fatalf("shard 2 = %+v", s2)
	}
	for _, sh := range []int{0, 3} {
		if g := obs.Shards[sh]; g.Parked != 0 || g.Overdue != 0 || g.OldestOverdue != 0 || !slices.Equal(g.DueWithin, []int64{0, 0, 0}) {
			t.Fatalf("empty shard %d = %+v", sh, g)
		}
	}
	// A claimed message is re-scored to its lease expiry: no longer overdue.
	c, err := f.s.Claim(t.Context(), 1, 10)
	if err != nil || len(c.Messages) != 2 {
		t.Fatalf("claim: %v, %d messages", err, len(c.Messages))
	}
	obs, err = f.s.Observe(t.Context(), allShards(f.s.Shards()), horizons)
	if err != nil {
		t.Fatal(err)
	}
	if g := obs.Shards[1]; g.Parked != 2 || g.Overdue != 0 || g.OldestOverdue != 0 || !slices.Equal(g.DueWithin, []int64{2, 2, 2}) {
		t.Fatalf("shard 1 after the claim (30s lease) = %+v", g)
	}
	// Only the shards asked for, in that order.
	obs, err = f.s.Observe(t.Context(), []int{2, 1}, horizons)
	if err != nil || len(obs.Shards) != 2 || obs.Shards[0].Shard != 2 || obs.Shards[0].Parked != 4 ||
		obs.Shards[1].Shard != 1 || obs.Shards[1].Parked != 2 {
		t.Fatalf("observe [2 1] = %+v, %v", obs, err)
	}
	if _, err := f.s.Observe(t.Context(), []int{4}, nil); err == nil {
		t.Fatal("shard 4 of 4 observed")
	}
}

// ScriptTimer reports each script's round trips by name, pipelines once.
func TestScriptTimer(t *testing.T) {
	f := setup(t)
	var mu sync.Mutex
	seen := map[string]int{}
	f.rdb.AddHook(f.s.ScriptTimer(func(script string, d time.Duration) {
		if d <= 0 {
			t.Errorf("%s: duration %s", script, d)
		}
		mu.Lock()
		seen[script]++
		mu.Unlock()
	}))
	now := f.now(t)
	ids := idsOnShard(f.s, 0, 3, "timed")
	f.park(t,
		ParkRequest{ID: ids[0], Absolute: true, At: now - 1, Envelope: sampleEnvelope(0)},
		ParkRequest{ID: ids[1], Absolute: true, At: now - 1, Envelope: sampleEnvelope(1)},
		ParkRequest{ID: ids[2], Absolute: true, At: now - 1, Envelope: sampleEnvelope(2)},
		ParkRequest{ID: "elsewhere", Delay: time.Hour, Envelope: sampleEnvelope(3)},
	)
	c, err := f.s.Claim(t.Context(), 0, 10)
	if err != nil || len(c.Messages) != 3 {
		t.Fatalf("claim: %v, %d messages", err, len(c.Messages))
	}
	if _, err := f.s.Ack(t.Context(), []Receipt{c.Messages[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: c.Messages[1].Receipt}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Cancel(t.Context(), ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Observe(t.Context(), allShards(f.s.Shards()), nil); err != nil { // not a script: not reported
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The first park of a target and source in a shard interns them (one call).
	want := map[string]int{"intern": 1, "park": 1, "claim": 1, "ack": 1, "retry": 1, "cancel": 1}
	for k, v := range want {
		if seen[k] != v {
			t.Fatalf("observed %v, want %v", seen, want)
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("observed %v, want %v", seen, want)
	}
}

// A message in retry stays overdue (counted from its due time as scheduled) although its
// score is the next attempt's time; a put-back message does not enter the retry set and
// keeps its attempts; ack, cancel and a replacing park take an id out of the retry set.
func TestRetrySetOverdue(t *testing.T) {
	f := setup(t)
	now := f.now(t)
	ids := idsOnShard(f.s, 1, 4, "retrying")
	for i, id := range ids {
		f.park(t, ParkRequest{ID: id, Absolute: true, At: now - 5_000, Envelope: sampleEnvelope(i)})
	}
	c, err := f.s.Claim(t.Context(), 1, 10)
	if err != nil || len(c.Messages) != 4 {
		t.Fatalf("claim: %v, %d messages", err, len(c.Messages))
	}
	reqs := []RetryRequest{{Receipt: c.Messages[0].Receipt, Backoff: time.Hour},
		{Receipt: c.Messages[1].Receipt, Backoff: time.Hour},
		{Receipt: c.Messages[2].Receipt, Backoff: time.Hour},
		{Receipt: c.Messages[3].Receipt, Backoff: time.Hour, PutBack: true}}
	if a, err := f.s.Retry(t.Context(), reqs); err != nil || a.N != 4 {
		t.Fatalf("retry: %v, %d applied", err, a.N)
	}
	overdue := func(want int64) {
		t.Helper()
		obs, err := f.s.Observe(t.Context(), allShards(f.s.Shards()), nil)
		if err != nil {
			t.Fatal(err)
		}
		g := obs.Shards[1]
		if g.Overdue != want || (want > 0) != (g.OldestOverdue >= 5*time.Second) {
			t.Fatalf("shard 1 = %+v, want %d overdue (oldest >= 5s when any)", g, want)
		}
	}
	overdue(3) // the put-back one is not overdue: it was never tried
	if m, err := f.s.Get(t.Context(), c.Messages[3].ID); err != nil || m.Attempts != 0 {
		t.Fatalf("put back: %+v %v, want attempts 0", m, err)
	}
	if m, err := f.s.Get(t.Context(), c.Messages[0].ID); err != nil || m.Attempts != 1 {
		t.Fatalf("retried: %+v %v, want attempts 1", m, err)
	}
	if _, err := f.s.Cancel(t.Context(), c.Messages[0].ID); err != nil {
		t.Fatal(err)
	}
	f.park(t, ParkRequest{ID: c.Messages[1].ID, Replace: true, Delay: time.Hour, Envelope: sampleEnvelope(9)})
	overdue(1)
	if err := f.rdb.ZAdd(t.Context(), f.s.keys[1].z, redis.Z{Score: float64(now - 1), Member: c.Messages[2].ID}).Err(); err != nil {
		t.Fatal(err)
	}
	c2, err := f.s.Claim(t.Context(), 1, 1)
	if err != nil || len(c2.Messages) != 1 || c2.Messages[0].ID != c.Messages[2].ID {
		t.Fatalf("claim again: %v %+v", err, c2.Messages)
	}
	overdue(1) // being retried again: still overdue
	if a, err := f.s.Ack(t.Context(), []Receipt{c2.Messages[0].Receipt}); err != nil || a.N != 1 {
		t.Fatalf("ack: %v %+v", err, a)
	}
	overdue(0)
	if n, err := f.rdb.Exists(t.Context(), f.s.keys[1].r).Result(); err != nil || n != 0 {
		t.Fatalf("retry set still exists (%d, %v)", n, err)
	}
}
