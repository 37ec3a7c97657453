package delaystore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/glob"
)

// TestPauseSet: a pause and a resume each change the set once (a repeat, or a resume of
// a glob not paused, says so and changes nothing), the set remembers a resume, and it is
// bounded: forged and huge globs are refused before Redis, and at most MaxPaused globs are
// paused at once.
func TestPauseSet(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	c, err := f.s.PauseTarget(ctx, "orders.*")
	if err != nil || !c.Changed || c.Paused != c.Now || c.Now == 0 {
		t.Fatalf("pause = %+v, %v", c, err)
	}
	again, err := f.s.PauseTarget(ctx, "orders.*")
	if err != nil || again.Changed || again.Paused != c.Paused {
		t.Fatalf("pause again = %+v, %v; want unchanged, paused at %d", again, err, c.Paused)
	}
	ps, err := f.s.Pauses(ctx)
	if err != nil || len(ps) != 1 || ps[0] != (Pause{Glob: "orders.*", Paused: c.Paused}) {
		t.Fatalf("pauses = %+v, %v", ps, err)
	}
	r, err := f.s.ResumeTarget(ctx, "orders.*")
	if err != nil || !r.Changed || r.Paused != c.Paused {
		t.Fatalf("resume = %+v, %v", r, err)
	}
	if r2, err := f.s.ResumeTarget(ctx, "orders.*"); err != nil || r2.Changed {
		t.Fatalf("resume again = %+v, %v; want unchanged", r2, err)
	}
	ps, _ = f.s.Pauses(ctx)
	if len(ps) != 1 || ps[0].Resumed != r.Now || ps[0].Paused != c.Paused {
		t.Fatalf("pauses after resume = %+v", ps)
	}
	for _, bad := range []string{strings.Repeat("a", glob.MaxSelectorBytes+1), strings.Repeat("*a", 17), "[", "a\\"} {
		if _, err := f.s.PauseTarget(ctx, bad); err == nil {
			t.Fatalf("glob %.20q accepted", bad)
		}
	}
	for i := range MaxPaused {
		if _, err := f.s.PauseTarget(ctx, fmt.Sprintf("t%d.*", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.s.PauseTarget(ctx, "one.more"); !errors.Is(err, ErrTooManyPaused) {
		t.Fatalf("pause beyond %d = %v, want ErrTooManyPaused", MaxPaused, err)
	}
	if n := f.rdb.HLen(ctx, "{"+f.prefix+":pause}").Val(); n != MaxPaused+1 {
		t.Fatalf("pause set holds %d fields, want %d", n, MaxPaused+1)
	}
}

// TestPauseAtOnce: many callers pausing one glob at once: exactly one changes the set.
func TestPauseAtOnce(t *testing.T) {
	f := setup(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	changed := 0
	for range 16 {
		wg.Go(func() {
			c, err := f.s.PauseTarget(t.Context(), "x.*")
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if c.Changed {
				changed++
			}
		})
	}
	wg.Wait()
	if changed != 1 {
		t.Fatalf("%d callers paused it, want 1", changed)
	}
}

// TestUnpause: a put-back message goes back to its due time (claimable at once, its
// version and attempts kept); one in delivery, one replaced since the scan and one whose
// score moved since are left alone.
func TestUnpause(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	ids := idsOnShard(f.s, 1, 4, "unpause")
	for i, id := range ids {
		f.park(t, ParkRequest{ID: id, Envelope: sampleEnvelope(i)})
	}
	c, err := f.s.Claim(ctx, 1, 100)
	if err != nil || len(c.Messages) != 4 {
		t.Fatalf("claim = %d messages, %v", len(c.Messages), err)
	}
	byID := map[string]Claimed{}
	for _, m := range c.Messages {
		byID[m.ID] = m
	}
	var got []Claimed
	for _, id := range ids {
		got = append(got, byID[id])
	}
	// ids[0..2] put back for ten minutes, ids[3] stays in delivery.
	var back []RetryRequest
	for _, m := range got[:3] {
		back = append(back, RetryRequest{Receipt: m.Receipt, Backoff: 10 * time.Minute, PutBack: true})
	}
	if a, err := f.s.Retry(ctx, back); err != nil || a.N != 3 {
		t.Fatalf("put back = %+v, %v", a, err)
	}
	page := f.s.Scan(ctx, []ScanRequest{{Shard: 1, From: 0, To: heldScore - 1, Count: 100}})[0]
	if page.Err != nil {
		t.Fatal(page.Err)
	}
	entries := page.Entries
	if len(entries) != 4 {
		t.Fatalf("scanned %d entries, want 4", len(entries))
	}
	f.park(t, ParkRequest{ID: ids[1], Replace: true, Delay: time.Hour, Envelope: sampleEnvelope(9)}) // replaced since the scan
	if err := f.rdb.ZAdd(ctx, "{"+f.prefix+":1}:z", redis.Z{Member: ids[2], Score: float64(got[2].Due + 7_777_777)}).Err(); err != nil {
		t.Fatal(err) // its score moved since the scan
	}
	n, err := f.s.Unpause(ctx, 1, entries)
	if err != nil || n != 1 {
		t.Fatalf("unpause = %d, %v; want 1", n, err)
	}
	m, _ := f.claimID(t, ids[0], time.Nanosecond)
	if m.Version != got[0].Version || m.Attempts != 0 || m.Due != got[0].Due {
		t.Fatalf("claimed after unpause %+v, want version %d, attempts 0, due %d", m, got[0].Version, got[0].Due)
	}
	for _, id := range ids[1:] {
		sc := f.rdb.ZScore(ctx, "{"+f.prefix+":1}:z", id).Val()
		if int64(sc) <= f.now(t) {
			t.Fatalf("%s re-scored to %v, want left alone", id, sc)
		}
	}
}

// TestPauseMiniredis: the dev bridge's store (miniredis, gopher-lua) pauses, resumes and
// unpauses as Redis does.
func TestPauseMiniredis(t *testing.T) {
	s := miniredisStore(t, miniredis.RunT(t), Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	ctx := t.Context()
	if c, err := s.PauseTarget(ctx, "a.*"); err != nil || !c.Changed {
		t.Fatalf("pause = %+v, %v", c, err)
	}
	if c, err := s.PauseTarget(ctx, "a.*"); err != nil || c.Changed {
		t.Fatalf("pause again = %+v, %v", c, err)
	}
	if c, err := s.ResumeTarget(ctx, "a.*"); err != nil || !c.Changed {
		t.Fatalf("resume = %+v, %v", c, err)
	}
	if ps, err := s.Pauses(ctx); err != nil || len(ps) != 1 || ps[0].Resumed == 0 {
		t.Fatalf("pauses = %+v, %v", ps, err)
	}
	id := idsOnShard(s, 0, 1, "mini")[0]
	if _, err := s.Park(ctx, []ParkRequest{{ID: id, Envelope: sampleEnvelope(0)}}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, 0, 10)
	if err != nil || len(c.Messages) != 1 {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	if _, err := s.Retry(ctx, []RetryRequest{{Receipt: c.Messages[0].Receipt, Backoff: PauseHold, PutBack: true}}); err != nil {
		t.Fatal(err)
	}
	page := s.Scan(ctx, []ScanRequest{{Shard: 0, From: 0, To: heldScore - 1, Count: 10}})[0]
	if n, err := s.Unpause(ctx, 0, page.Entries); err != nil || n != 1 {
		t.Fatalf("unpause = %d, %v", n, err)
	}
}
