package delaystore

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// fill makes srv refuse writes for memory: noeviction and a maxmemory below what it uses.
func fill(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := t.Context()
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
}

// A full Redis (maxmemory reached, noeviction) refuses new parks, the back-pressure, but
// claim, ack, retry and cancel still run (allow-oom), also when sent with EVAL after the
// script cache was flushed: delivery goes on and frees memory. Room again: parks resume.
func TestFullRedisKeepsDelivering(t *testing.T) {
	f, _ := ownServer(t, func(c *Config) { c.Shards = 1 })
	ctx := t.Context()
	if _, err := f.s.Park(ctx, []ParkRequest{
		{ID: "due-1", Envelope: sampleEnvelope(1)},
		{ID: "due-2", Envelope: sampleEnvelope(2)},
		{ID: "due-3", Envelope: sampleEnvelope(3)},
		{ID: "later", Delay: time.Hour, Envelope: sampleEnvelope(4)},
	}); err != nil {
		t.Fatal(err)
	}
	if full, n := f.s.MemoryFull(); full || n != 0 {
		t.Fatalf("MemoryFull before Redis was full = %v, %d", full, n)
	}
	fill(t, f.rdb)

	_, err := f.s.Park(ctx, []ParkRequest{{ID: "refused", Envelope: sampleEnvelope(5)}})
	if !IsOOM(err) {
		t.Fatalf("park on a full Redis = %v, want -OOM", err)
	}
	if full, n := f.s.MemoryFull(); !full || n != 1 {
		t.Fatalf("MemoryFull after a park refused with -OOM = %v, %d; want true, 1", full, n)
	}
	if _, err := f.s.Get(ctx, "refused"); err == nil {
		t.Fatal("a refused park wrote its message")
	}

	// A replica that starts now (a restarted sidecar) initialises and delivers too.
	other, err := New(f.rdb, Config{KeyPrefix: f.prefix, Shards: 1, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Init(ctx); err != nil {
		t.Fatalf("init on a full Redis: %v", err)
	}
	if err := f.rdb.ScriptFlush(ctx).Err(); err != nil { // and its SCRIPT LOAD went through
		t.Fatal(err)
	}
	if err := other.Init(ctx); err != nil {
		t.Fatalf("init on a full Redis after SCRIPT FLUSH: %v", err)
	}
	if other.scripts[scriptClaim].usePlain.Load() {
		t.Fatal("init on a full Redis chose the unflagged claim")
	}

	c, err := f.s.Claim(ctx, 0, 10)
	if err != nil {
		t.Fatalf("claim on a full Redis: %v", err)
	}
	if len(c.Messages) != 3 {
		t.Fatalf("claimed %d messages, want 3", len(c.Messages))
	}
	if err := f.rdb.ScriptFlush(ctx).Err(); err != nil { // next calls go EVALSHA -> NOSCRIPT -> EVAL
		t.Fatal(err)
	}
	retried, err := f.s.Retry(ctx, []RetryRequest{{Receipt: c.Messages[0].Receipt, Backoff: time.Millisecond}})
	if err != nil || retried.N != 1 {
		t.Fatalf("retry on a full Redis = %+v, %v", retried, err)
	}
	acked, err := f.s.Ack(ctx, []Receipt{c.Messages[1].Receipt, c.Messages[2].Receipt})
	if err != nil || acked.N != 2 {
		t.Fatalf("ack on a full Redis = %+v, %v", acked, err)
	}
	if ok, err := f.s.Cancel(ctx, "later"); err != nil || !ok {
		t.Fatalf("cancel on a full Redis = %v, %v", ok, err)
	}
	// The retried message comes due again (1 ms) and is delivered, still on a full Redis.
	var again Claim
	deadline := time.Now().Add(10 * time.Second)
	for len(again.Messages) == 0 && time.Now().Before(deadline) {
		if again, err = f.s.Claim(ctx, 0, 10); err != nil {
			t.Fatalf("second claim on a full Redis: %v", err)
		}
	}
	if len(again.Messages) != 1 || again.Messages[0].ID != c.Messages[0].ID || again.Messages[0].Attempts != 1 {
		t.Fatalf("second claim = %+v, want %s with attempts 1", again.Messages, c.Messages[0].ID)
	}
	if a, err := f.s.Ack(ctx, []Receipt{again.Messages[0].Receipt}); err != nil || a.N != 1 {
		t.Fatalf("ack of the retried message = %+v, %v", a, err)
	}
	if z, m := f.counts(t); z != 0 || m != 0 {
		t.Fatalf("store holds %d/%d entries after delivering everything", z, m)
	}
	if _, err := f.s.Park(ctx, []ParkRequest{{ID: "refused", Envelope: sampleEnvelope(5)}}); !IsOOM(err) {
		t.Fatalf("park still on a full Redis = %v, want -OOM", err)
	}

	// Room again: the next park writes and clears MemoryFull.
	if err := f.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Park(ctx, []ParkRequest{{ID: "refused", Envelope: sampleEnvelope(5)}}); err != nil {
		t.Fatalf("park after memory was freed: %v", err)
	}
	if full, n := f.s.MemoryFull(); full || n != 2 {
		t.Fatalf("MemoryFull after a park wrote = %v, %d; want false, 2 refusals in all", full, n)
	}
}

// Without the flags, a full Redis refuses the claim: the unflagged form (what Redis 6 and
// miniredis run) is the source with the shebang commented out, and the flag is what lets
// delivery go on.
func TestFullRedisRefusesUnflaggedClaim(t *testing.T) {
	f, _ := ownServer(t, func(c *Config) { c.Shards = 1 })
	ctx := t.Context()
	if _, err := f.s.Park(ctx, []ParkRequest{{ID: "due", Envelope: sampleEnvelope(1)}}); err != nil {
		t.Fatal(err)
	}
	fill(t, f.rdb)
	f.s.scripts[scriptClaim].usePlain.Store(true)
	if _, err := f.s.Claim(ctx, 0, 10); !IsOOM(err) {
		t.Fatalf("unflagged claim on a full Redis = %v, want -OOM", err)
	}
	f.s.scripts[scriptClaim].usePlain.Store(false)
	if c, err := f.s.Claim(ctx, 0, 10); err != nil || len(c.Messages) != 1 {
		t.Fatalf("flagged claim on a full Redis = %+v, %v", c, err)
	}
}

// Servers that cannot compile a shebang (miniredis here, Redis 6) get the unflagged form
// from Init on, by SHA and in the EVAL resent after NOSCRIPT; Redis 7 keeps the flags.
func TestScriptFormFallback(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb, Config{KeyPrefix: "dev", Shards: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	for name, sc := range map[string]*script{"claim": s.scripts[scriptClaim], "ack": s.scripts[scriptAck], "retry": s.scripts[scriptRetry], "cancel": s.scripts[scriptCancel]} {
		if !sc.usePlain.Load() {
			t.Errorf("%s: miniredis got the flagged form", name)
		}
	}
	if _, err := s.Park(ctx, []ParkRequest{{ID: "a", Envelope: sampleEnvelope(1)}, {ID: "b", Envelope: sampleEnvelope(2)},
		{ID: "c", Delay: time.Hour, Envelope: sampleEnvelope(3)}}); err != nil {
		t.Fatal(err)
	}
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush() // every call below goes EVALSHA -> NOSCRIPT -> EVAL
	c, err := s.Claim(ctx, 0, 10)
	if err != nil || len(c.Messages) != 2 {
		t.Fatalf("claim after SCRIPT FLUSH = %+v, %v", c, err)
	}
	flush()
	if r, err := s.Retry(ctx, []RetryRequest{{Receipt: c.Messages[0].Receipt, Backoff: time.Hour}}); err != nil || r.N != 1 {
		t.Fatalf("retry after SCRIPT FLUSH = %+v, %v", r, err)
	}
	flush()
	if a, err := s.Ack(ctx, []Receipt{c.Messages[1].Receipt}); err != nil || a.N != 1 {
		t.Fatalf("ack after SCRIPT FLUSH = %+v, %v", a, err)
	}
	flush()
	if ok, err := s.Cancel(ctx, "c"); err != nil || !ok {
		t.Fatalf("cancel after SCRIPT FLUSH = %v, %v", ok, err)
	}

	real := newFixture(t, testredis.URL(t))
	for name, sc := range map[string]*script{"claim": real.s.scripts[scriptClaim], "ack": real.s.scripts[scriptAck], "retry": real.s.scripts[scriptRetry], "cancel": real.s.scripts[scriptCancel]} {
		if sc.usePlain.Load() {
			t.Errorf("%s: redis-server 7 got the unflagged form", name)
		}
	}
}

// TestUnflagged: the unflagged form differs from the source only by "--" before its
// shebang line, and exactly the scripts that must run on a full Redis declare allow-oom.
func TestUnflagged(t *testing.T) {
	for name, tc := range map[string]struct {
		src      string
		allowOOM bool
	}{
		"park": {fileOf(t, scriptPark), false}, "claim": {fileOf(t, scriptClaim), true}, "ack": {fileOf(t, scriptAck), true},
		"retry": {fileOf(t, scriptRetry), true}, "cancel": {fileOf(t, scriptCancel), true},
	} {
		first, _, _ := strings.Cut(tc.src, "\n")
		if got := first == "#!lua flags=allow-oom"; got != tc.allowOOM {
			t.Errorf("%s: first line %q, allow-oom %v, want %v", name, first, got, tc.allowOOM)
		}
		want := tc.src
		if tc.allowOOM {
			want = "--" + tc.src
		}
		if got := unflagged(tc.src); got != want {
			t.Errorf("%s: unflagged form is not the source with its first line commented out", name)
		}
	}
}

// TestWithLibs: the scripts that share lua/envelope.lua get its functions in place of their
// include line, once, after a shebang that must stay the first line.
func TestWithLibs(t *testing.T) {
	for name, src := range map[string]string{"park": sourceOf(t, scriptPark), "ack": sourceOf(t, scriptAck), "cancel": sourceOf(t, scriptCancel)} {
		if strings.Contains(src, strings.TrimSpace(includeLine("envelope.lua"))+"\n") {
			t.Errorf("%s: the include line is still there", name)
		}
		if n := strings.Count(src, "local function sourceOf("); n != 1 {
			t.Errorf("%s: sourceOf defined %d times, want 1", name, n)
		}
	}
	for name, pair := range map[string][2]string{"ack": {fileOf(t, scriptAck), sourceOf(t, scriptAck)}, "cancel": {fileOf(t, scriptCancel), sourceOf(t, scriptCancel)}} {
		first := func(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }
		if first(pair[1]) != first(pair[0]) || !strings.HasPrefix(pair[1], "#!lua") {
			t.Errorf("%s: first line %q, want the source's shebang", name, first(pair[1]))
		}
	}
}

// A shard's part of a park larger than pieceBytes goes in as pieces: a Redis with room for
// some of them parks those (their results filled in: ingress acks them) and refuses the
// rest, instead of refusing the shard's whole group until that much was freed (fault row
// B9 with runs of positions longer than a batch).
func TestParkPiecesOnNearlyFullRedis(t *testing.T) {
	f, _ := ownServer(t, func(c *Config) { c.Shards = 1 })
	ctx := t.Context()
	if _, err := f.s.Park(ctx, []ParkRequest{{ID: "warm", Envelope: sampleEnvelope(0)}}); err != nil {
		t.Fatal(err) // scripts loaded, keys made: what follows only adds entries
	}
	const n, size = 16, 4 << 10 // 64 KB in one shard: 4 pieces of 16 KB, 2 calls
	reqs := make([]ParkRequest, n)
	for i := range reqs {
		e := sampleEnvelope(i)
		e.Payload = bytes.Repeat([]byte{byte('a' + i)}, size)
		reqs[i] = ParkRequest{ID: fmt.Sprintf("big-%d", i), Delay: time.Hour, Envelope: e}
	}
	if err := f.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	used := int64(usedMemory(t, f))
	// Room for a call of pieces (up to 32 KB of arguments) and what it stores, not for the
	// shard's whole 64 KB at once.
	if err := f.rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(used+56<<10)).Err(); err != nil {
		t.Fatal(err)
	}
	parked, err := f.s.Park(ctx, reqs)
	_ = f.rdb.ConfigSet(ctx, "maxmemory", "0")
	if !IsOOM(err) {
		t.Fatalf("park of %d x %d B with 56 KB of room = %v, want -OOM for the pieces that did not fit", n, size, err)
	}
	got := 0
	for i, p := range parked {
		if p.ID == "" {
			continue
		}
		got++
		if _, gerr := f.s.Get(ctx, reqs[i].ID); gerr != nil {
			t.Fatalf("%s reported parked but not stored: %v", reqs[i].ID, gerr)
		}
	}
	if got == 0 || got == n {
		t.Fatalf("%d of %d parked with room for about half: the shard's group was not split", got, n)
	}
	t.Logf("%d of %d parked", got, n)
}

// splitPieces keeps pieces under the limit, in request order, and every request of an id
// in the piece of its first.
func TestSplitPieces(t *testing.T) {
	ids := []string{"a", "b", "c", "a", "d", "e", "b", "f"}
	reqs := make([]ParkRequest, len(ids))
	idx := make([]int, len(ids))
	bodies := make([][]byte, len(ids))
	for i, id := range ids {
		reqs[i] = ParkRequest{ID: id}
		idx[i] = i
		bodies[i] = make([]byte, 10)
	}
	if got := splitPieces(reqs, idx, bodies, 80); got != nil {
		t.Fatalf("under the limit: %v, want nil (one piece of all)", got)
	}
	got := splitPieces(reqs, idx, bodies, 25)
	want := [][]int{{0, 1, 3, 6}, {2, 4}, {5, 7}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pieces %v, want %v", got, want)
	}
	big := [][]byte{make([]byte, 100), make([]byte, 100)}
	if got := splitPieces(reqs, []int{4, 5}, big, 25); fmt.Sprint(got) != "[[0] [1]]" {
		t.Fatalf("requests over the limit each: %v, want one piece each", got)
	}
	reqs[2].Envelope.OrderingKey, reqs[7].Envelope.OrderingKey = "k", "k" // c and f: one key
	got = splitPieces(reqs, idx, bodies, 25)
	if want := [][]int{{0, 1, 3, 6}, {2, 4, 7}, {5}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pieces with a key %v, want %v (a key's requests in its first's piece)", got, want)
	}
}
