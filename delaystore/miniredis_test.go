package delaystore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// miniredisStore is a store of cfg on mr (the dev mode's server, gopher-lua), initialised.
func miniredisStore(t *testing.T, mr *miniredis.Miniredis, cfg Config) *Store {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// The dev mode runs the store on miniredis (gopher-lua): the scripts must work there too.
func TestMiniredis(t *testing.T) {
	s := miniredisStore(t, miniredis.RunT(t), Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	ctx := t.Context()
	wakes, err := s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wakes.Close()
	firstResync(t, wakes.C)
	if err := wakes.Follow(ctx, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	// Membership runs there too (member.lua, unflagged).
	m, err := confirmedBeat(ctx, s, "dev-1", time.Minute, 0, "")
	if err != nil || !m.Changed || m.Version != 1 || !reflect.DeepEqual(m.IDs, []string{"dev-1"}) {
		t.Fatalf("heartbeat = %+v, %v", m, err)
	}
	if w := nextWake(t, wakes.C, 5*time.Second); w != (Wake{Shard: WakeFleet, Due: 1}) {
		t.Fatalf("wake %+v, want fleet version 1", w)
	}
	if err := s.Leave(ctx, "dev-1"); err != nil {
		t.Fatal(err)
	}
	if w := nextWake(t, wakes.C, 5*time.Second); w != (Wake{Shard: WakeFleet, Due: 2}) {
		t.Fatalf("wake %+v, want fleet version 2", w)
	}

	before := time.Now().UnixMilli()
	parked, err := s.Park(ctx, []ParkRequest{
		{ID: "a", Envelope: withSource(sampleEnvelope(1), "js:IN:1")},
		{ID: "b", Envelope: sampleEnvelope(2)},
		{ID: "c", Envelope: sampleEnvelope(3)},
		{ID: "later", Delay: time.Hour},
		{ID: "abs", Absolute: true, At: 4102444800123},
	})
	if err != nil {
		t.Fatal(err)
	}
	if parked[0].Due < before || parked[0].Due > time.Now().UnixMilli() || parked[4].Due != 4102444800123 {
		t.Fatalf("parked %+v", parked)
	}
	if w := nextWake(t, wakes.C, 5*time.Second); w.Shard < 0 {
		t.Fatalf("wake %+v", w)
	}
	again, err := s.Park(ctx, []ParkRequest{{ID: "a", Delay: time.Hour}})
	if err != nil || !again[0].Existed || again[0].Due != parked[0].Due {
		t.Fatalf("idempotent park = %+v, %v", again, err)
	}

	claimed := map[string]Claimed{}
	for sh := range s.Shards() {
		c, err := s.Claim(ctx, sh, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Messages {
			if c.Now < m.Due {
				t.Fatalf("early: %+v at %d", m, c.Now)
			}
			claimed[m.ID] = m
		}
	}
	if len(claimed) != 3 || !reflect.DeepEqual(claimed["b"].Envelope, sampleEnvelope(2)) {
		t.Fatalf("claimed %+v", claimed)
	}

	a, err := s.Ack(ctx, []Receipt{claimed["a"].Receipt, claimed["b"].Receipt})
	if err != nil || a.N != 2 {
		t.Fatalf("ack = %+v, %v", a, err)
	}
	// a had a source id: its redelivery is absorbed by the tombstone.
	if p, err := s.Park(ctx, []ParkRequest{{ID: "a", Envelope: withSource(sampleEnvelope(1), "js:IN:1")}}); err != nil || !p[0].Delivered {
		t.Fatalf("redelivery after ack = %+v, %v", p, err)
	}
	r, err := s.Retry(ctx, []RetryRequest{{Receipt: claimed["c"].Receipt}})
	if err != nil || r.N != 1 {
		t.Fatalf("retry = %+v, %v", r, err)
	}
	var c Claim
	for deadline := time.Now().Add(2 * time.Second); len(c.Messages) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the retry is due 1ms later (minimum backoff)
		if c, err = s.Claim(ctx, claimed["c"].Shard, 10); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.Messages) != 1 || c.Messages[0].Attempts != 1 || c.Messages[0].ID != "c" {
		t.Fatalf("claim after retry = %+v", c)
	}
	if a, err := s.Ack(ctx, []Receipt{claimed["c"].Receipt}); err != nil || a.N != 0 {
		t.Fatalf("stale ack = %+v, %v", a, err)
	}

	if ok, err := s.Cancel(ctx, "later"); !ok || err != nil {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	if ok, err := s.Cancel(ctx, "later"); ok || err != nil {
		t.Fatalf("second cancel = %v, %v", ok, err)
	}
	if _, err := s.Get(ctx, "later"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get = %v", err)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Parked != 2 { // c (claimed) and abs
		t.Fatalf("stats = %+v, %v", st, err)
	}
}

func withSource(e Envelope, sourceID string) Envelope {
	e.SourceID = sourceID
	return e
}

// TestMiniredisWithoutInit: a store used without Init, whose scripts were never loaded
// (the audit entry `bridge redrive` writes), runs its flagged scripts on a server that
// cannot compile their flags line (miniredis, as Redis 6) in their unflagged form.
func TestMiniredisWithoutInit(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb, Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := s.AuditAppend(ctx, "op", `{"entry":{"op":"redrive"}}`, "alice", time.Minute, time.Hour, 10); err != nil {
		t.Fatalf("audit begin without Init: %v", err)
	}
	if ok, err := s.AuditSet(ctx, "op", "alice", AuditState{State: "done", Matched: 2, Changed: 1}); !ok || err != nil {
		t.Fatalf("audit set without Init: %v %v", ok, err)
	}
	if p, err := s.AuditRead(ctx, "", 10, time.Hour); err != nil || len(p.Rows) != 1 || p.Rows[0].State != "done" ||
		p.Rows[0].Matched != 2 || p.Rows[0].Changed != 1 {
		t.Fatalf("records %+v, %v; want one, done 2/1", p, err)
	}
}
