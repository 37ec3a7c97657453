package egress

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestPausedTarget: a paused target's messages are claimed and put back unpublished, no
// attempt counted, while another target's go out; one whose expiry comes during the pause
// is dead-lettered as expired; once resumed (the set, then unpause) they go out, each
// once, in due order (within a shard, as any backlog) and no faster than the target's rate.
func TestPausedTarget(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	ctx := context.Background()
	if _, err := st.PauseTarget(ctx, "slow.*"); err != nil {
		t.Fatal(err)
	}
	gc := newBroker(t)
	slow, fast, dlq := collect(t, gc, "slow.a"), collect(t, gc, "fast"), collect(t, gc, "delay.dlq")
	const n, rate = 20, 40
	var reqs []delaystore.ParkRequest
	for i := range n {
		for _, target := range []string{"nats:slow.a", "nats:fast"} {
			reqs = append(reqs, delaystore.ParkRequest{ID: target + strconv.Itoa(i), Replace: true, Delay: time.Duration(i) * time.Millisecond,
				Envelope: delaystore.Envelope{Target: target, Source: "http", Payload: []byte("x")}})
		}
	}
	reqs = append(reqs, delaystore.ParkRequest{ID: "expiring", Envelope: delaystore.Envelope{Target: "nats:slow.a", Source: "http",
		Expires: 300 * time.Millisecond, Payload: []byte("x")}})
	if _, err := st.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	runEgress(t, Config{TargetRate: "slow.*=" + strconv.Itoa(rate) + "/s"}, st, map[string]message.Publisher{"nats": gc})
	for range n {
		waitFor(t, fast, 5*time.Second)
	}
	if g := waitFor(t, dlq, 5*time.Second); headers.FromMetadata(g.msg.Metadata).Values(contract.HeaderError)[0][:len(contract.ReasonExpired)] != contract.ReasonExpired {
		t.Fatalf("dead letter %v, want expired", g.msg.Metadata)
	}
	// Every paused message is put back past the pause hold's start, unpublished.
	deadline := time.Now().Add(10 * time.Second)
	var waiting []delaystore.Scanned
	for {
		waiting = pausedEntries(t, st)
		if len(waiting) == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // poll
	}
	if len(waiting) != n {
		t.Fatalf("%d of %d paused messages put back", len(waiting), n)
	}
	for _, e := range waiting {
		if e.Attempts != 0 || e.Scheduled < time.Now().Add(pauseHold/2).UnixMilli() {
			t.Fatalf("paused message %+v: want attempts 0, put back for the pause hold", e)
		}
	}
	select {
	case g := <-slow:
		t.Fatalf("paused target published %v", g.msg.Metadata)
	default:
	}
	if _, err := st.ResumeTarget(ctx, "slow.*"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pauseSettle) // every reader saw the resume (as admin.Resume waits)
	moved := 0
	for shard := range st.Shards() {
		var mine []delaystore.Scanned
		for _, e := range waiting {
			if st.ShardOf(e.ID) == shard {
				mine = append(mine, e)
			}
		}
		m, err := st.Unpause(ctx, shard, mine)
		if err != nil {
			t.Fatal(err)
		}
		moved += m
	}
	if moved != n {
		t.Fatalf("unpause moved %d, want %d", moved, n)
	}
	start := time.Now()
	var last time.Time
	prev := map[int]int{} // shard -> the last index published
	seen := map[string]bool{}
	for range n {
		g := waitFor(t, slow, 10*time.Second)
		id, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderID)
		i, _ := strconv.Atoi(id[len("nats:slow.a"):])
		if p, ok := prev[st.ShardOf(id)]; seen[id] || (ok && i <= p) {
			t.Fatalf("%s after slow.a%d of its shard, or twice: want each once, in due order", id, p)
		}
		seen[id], prev[st.ShardOf(id)], last = true, i, g.at
	}
	if min := (n-1)*time.Second/rate - rateTolerance; last.Sub(start) < min {
		t.Fatalf("%d resumed messages at %d/s took %s, want at least %s", n, rate, last.Sub(start), min)
	}
	waitEmpty(t, st)
}

// pausedEntries are the entries of target nats:slow.a that wait for a time after now.
func pausedEntries(t *testing.T, st *delaystore.Store) []delaystore.Scanned {
	t.Helper()
	var out []delaystore.Scanned
	now := time.Now().UnixMilli()
	for shard := range st.Shards() {
		p := st.Scan(context.Background(), []delaystore.ScanRequest{{Shard: shard, From: now, To: 1 << 50, Count: 1000}})[0]
		if p.Err != nil {
			t.Fatal(p.Err)
		}
		for _, e := range p.Entries {
			if e.Target == "nats:slow.a" && e.Scheduled%2 == 1 {
				out = append(out, e)
			}
		}
	}
	return out
}

// TestPauseSplitAndLateness: a paused message is put back for the pause hold, or until
// just after its expiry deadline when that comes first, and one already expired is kept
// (dead-lettered now); a message due before a resume of its target counts its lateness
// from the resume, one of another target from its due time.
func TestPauseSplitAndLateness(t *testing.T) {
	const now = 1_000_000
	msg := func(id string, due int64, expires time.Duration) delaystore.Claimed {
		return delaystore.Claimed{Receipt: delaystore.Receipt{ID: id}, Due: due, Envelope: delaystore.Envelope{Target: "nats:a.b", Expires: expires}}
	}
	rest, back := pauseSplit([]delaystore.Claimed{
		msg("plain", now-10, 0), msg("soon", now-10, time.Second), msg("gone", now-10_000, time.Second),
	}, now)
	if len(rest) != 1 || rest[0].ID != "gone" || len(back) != 2 {
		t.Fatalf("rest %+v, back %+v", rest, back)
	}
	if back[0].Backoff != pauseHold || !back[0].PutBack || back[1].Backoff != 991*time.Millisecond {
		t.Fatalf("put-backs %+v, want the hold, then 991 ms (to just past the deadline)", back)
	}
	d := &delivery{pauses: &pauses{}}
	d.pauses.set([]delaystore.Pause{{Glob: "a.*", Paused: now - 5000, Resumed: now}, {Glob: "c", Paused: now}})
	if c := d.sinceResume(msg("x", now-4000, 0)); c.Due != now {
		t.Fatalf("lateness counted from %d, want the resume %d", c.Due, now)
	}
	if c := d.sinceResume(msg("x", now+10, 0)); c.Due != now+10 {
		t.Fatalf("a message due after the resume counts from %d", c.Due)
	}
	other := msg("y", now-4000, 0)
	other.Envelope.Target = "nats:b"
	if c := d.sinceResume(other); c.Due != now-4000 {
		t.Fatalf("another target's lateness counted from %d", c.Due)
	}
	if !d.pauses.of("nats:c").paused || d.pauses.of("nats:a.b").paused {
		t.Fatal("paused: want c, not a.b (resumed)")
	}
}

// TestPauseViewFollowsRedis: the pause view is Redis's, never more. A Redis that lost its
// data (FLUSHALL, as a restart without its files) has no pause: a message parked at once
// after it, claimed while this replica's view still said paused and so put back for the
// pause hold, is given its due time back when the view sees the glob vanish and goes
// out within about a second; a pause written after the loss is obeyed again.
func TestPauseViewFollowsRedis(t *testing.T) {
	srv := testredis.Start(t) // its own server: FLUSHALL
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PauseTarget(ctx, "slow.*"); err != nil {
		t.Fatal(err)
	}
	gc := newBroker(t)
	slow := collect(t, gc, "slow.a")
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": gc})
	quiet := func(within time.Duration) {
		t.Helper()
		select {
		case g := <-slow:
			t.Fatalf("paused target published %v", g.msg.Metadata)
		case <-time.After(within):
		}
	}
	park(t, st, "before", 0, "nats:slow.a", nil)
	quiet(time.Second)

	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Init(ctx); err != nil { // as the bridge's dataset check does after a loss
		t.Fatal(err)
	}
	park(t, st, "after", 0, "nats:slow.a", nil)
	g := waitFor(t, slow, pausePoll+3*time.Second)
	if id, _ := headers.FromMetadata(g.msg.Metadata).Get(contract.HeaderID); id != "after" {
		t.Fatalf("published %q, want after (before was lost with the data)", id)
	}

	if _, err := st.PauseTarget(ctx, "slow.*"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pauseSettle) // every reader saw it (as admin.Resume waits)
	park(t, st, "again", 0, "nats:slow.a", nil)
	quiet(time.Second)
}
