package delaystore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Heartbeat joins and renews, returns the sorted list only when the version moved, expires
// the members whose time ran out (on any member's heartbeat), and Leave removes; every
// change bumps the version once and publishes it on the fleet channel.
func TestFleetHeartbeat(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := f.s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	firstResync(t, w.C)
	fleetWake := func(version int64) {
		t.Helper()
		if wk := nextWake(t, w.C, 5*time.Second); wk != (Wake{Shard: WakeFleet, Due: version}) {
			t.Fatalf("wake %+v, want fleet version %d", wk, version)
		}
	}
	beat := func(id string, ttl time.Duration, known int64) Members {
		t.Helper()
		m, err := confirmedBeat(ctx, f.s, id, ttl, known, "")
		if err != nil {
			t.Fatalf("heartbeat %s: %v", id, err)
		}
		return m
	}
	membersKey := "{" + f.prefix + ":fleet}:members"

	before := f.now(t)
	m := beat("zeta-1", 10*time.Second, 0)
	if !m.Changed || m.Version != 1 || !slices.Equal(m.IDs, []string{"zeta-1"}) || m.Now < before {
		t.Fatalf("join = %+v", m)
	}
	if exp, err := f.rdb.ZScore(ctx, membersKey, "zeta-1").Result(); err != nil || int64(exp) != m.Now+10_000 {
		t.Fatalf("expiry %v, %v; want Redis time %d + 10s", exp, err, m.Now)
	}
	fleetWake(1)
	// A steady heartbeat: no change, no list.
	if m := beat("zeta-1", 10*time.Second, 1); m.Changed || m.Version != 1 || m.IDs != nil {
		t.Fatalf("renewal = %+v", m)
	}
	// Another member joins: the list comes back sorted, also to a caller that knew the old
	// version.
	if m := beat("alpha-2", 10*time.Second, 0); !m.Changed || m.Version != 2 || !slices.Equal(m.IDs, []string{"alpha-2", "zeta-1"}) {
		t.Fatalf("second join = %+v", m)
	}
	fleetWake(2)
	if m := beat("zeta-1", 10*time.Second, 1); !m.Changed || m.Version != 2 || !slices.Equal(m.IDs, []string{"alpha-2", "zeta-1"}) {
		t.Fatalf("renewal after a join = %+v", m)
	}
	// A member with a short time expires: the next heartbeat of anyone removes it.
	m = beat("short-3", 50*time.Millisecond, 2)
	if m.Version != 3 || len(m.IDs) != 3 {
		t.Fatalf("short join = %+v", m)
	}
	fleetWake(3)
	for f.now(t) <= m.Now+50 {
		time.Sleep(10 * time.Millisecond) // poll interval: until Redis time passed its expiry
	}
	if m := beat("zeta-1", 10*time.Second, 3); !m.Changed || m.Version != 4 || !slices.Equal(m.IDs, []string{"alpha-2", "zeta-1"}) {
		t.Fatalf("heartbeat after an expiry = %+v", m)
	}
	fleetWake(4)
	// Leave: gone, version + 1; leaving again changes nothing.
	if err := f.s.Leave(ctx, "alpha-2"); err != nil {
		t.Fatal(err)
	}
	fleetWake(5)
	if err := f.s.Leave(ctx, "alpha-2"); err != nil {
		t.Fatal(err)
	}
	if m := beat("zeta-1", 10*time.Second, 5); m.Changed || m.Version != 5 {
		t.Fatalf("after a repeated leave = %+v", m)
	}
	if m := beat("zeta-1", 10*time.Second, 4); !m.Changed || !slices.Equal(m.IDs, []string{"zeta-1"}) {
		t.Fatalf("list after the leave = %+v", m)
	}
	// Nothing else was published: the next wake is the one of this join.
	if m := beat("new-4", 10*time.Second, 5); m.Version != 6 {
		t.Fatalf("join after leave = %+v", m)
	}
	fleetWake(6)
}

// Heartbeat and Leave check their arguments before any I/O.
func TestFleetValidation(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	long := strings.Repeat("x", MaxMemberID+1)
	for _, tc := range []struct {
		id   string
		ttl  time.Duration
		want string
	}{
		{"", time.Second, "empty replica id"},
		{long, time.Second, "longer than 200"},
		{"a", 0, "shorter than 1ms"},
		{"a", time.Millisecond - 1, "shorter than 1ms"},
		{"a", -time.Second, "shorter than 1ms"},
	} {
		if _, err := f.s.Heartbeat(ctx, tc.id, tc.ttl, 0, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("heartbeat(%.10q, %s) = %v, want %q", tc.id, tc.ttl, err, tc.want)
		}
	}
	for id, want := range map[string]string{"": "empty replica id", long: "longer than 200"} {
		if err := f.s.Leave(ctx, id); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("leave(%.10q) = %v, want %q", id, err, want)
		}
	}
	if n := f.rdb.Exists(ctx, "{"+f.prefix+":fleet}:members", "{"+f.prefix+":fleet}:version").Val(); n != 0 {
		t.Fatalf("%d fleet keys written by refused calls", n)
	}
	if _, err := confirmedBeat(ctx, f.s, strings.Repeat("x", MaxMemberID), time.Millisecond, 0, ""); err != nil {
		t.Fatalf("the longest id and the shortest ttl: %v", err)
	}
}

// A full Redis (maxmemory, noeviction) does not stop heartbeats: member.lua runs with
// allow-oom, by SHA and by EVAL after a script flush.
func TestFleetFullRedis(t *testing.T) {
	f, _ := ownServer(t)
	ctx := t.Context()
	if _, err := confirmedBeat(ctx, f.s, "r1", time.Minute, 0, ""); err != nil {
		t.Fatal(err)
	}
	fill(t, f.rdb)
	if _, err := f.s.Park(ctx, []ParkRequest{{ID: "refused"}}); !IsOOM(err) {
		t.Fatalf("park on a full Redis = %v, want -OOM (is Redis full?)", err)
	}
	if m, err := confirmedBeat(ctx, f.s, "r1", time.Minute, 1, ""); err != nil || m.Changed {
		t.Fatalf("renewal on a full Redis = %+v, %v", m, err)
	}
	if err := f.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if m, err := confirmedBeat(ctx, f.s, "r2", time.Minute, 1, ""); err != nil || !slices.Equal(m.IDs, []string{"r1", "r2"}) {
		t.Fatalf("join on a full Redis after SCRIPT FLUSH = %+v, %v", m, err)
	}
	if err := f.s.Leave(ctx, "r2"); err != nil {
		t.Fatalf("leave on a full Redis: %v", err)
	}
}

// Follow subscribes exactly the given shards' channels: a park wakes only a followed
// shard, a dropped shard is silent, and a park right after Follow returned is heard.
func TestWakeFollow(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := f.s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	firstResync(t, w.C)
	ids := map[int][]string{}
	for sh := range 4 {
		ids[sh] = idsOnShard(f.s, sh, 10, fmt.Sprintf("f%d", sh))
	}
	delay := time.Hour
	parkOn := func(sh int) int64 { // each park earlier than the last: it always wakes
		t.Helper()
		delay -= time.Minute
		id := ids[sh][0]
		ids[sh] = ids[sh][1:]
		return f.park(t, ParkRequest{ID: id, Delay: delay})[0].Due
	}
	// Nothing followed: the channel only carries the fleet; parks are silent.
	parkOn(0)
	if err := w.Follow(ctx, []int{1, 3}); err != nil {
		t.Fatal(err)
	}
	parkOn(0)
	parkOn(2)
	due := parkOn(3) // after Follow returned: heard
	if wk := nextWake(t, w.C, 5*time.Second); wk != (Wake{Shard: 3, Due: due}) {
		t.Fatalf("wake %+v, want shard 3 due %d (shards 0 and 2 are not followed)", wk, due)
	}
	if err := w.Follow(ctx, []int{0, 1}); err != nil { // drop 3, add 0
		t.Fatal(err)
	}
	parkOn(3)
	due = parkOn(0)
	if wk := nextWake(t, w.C, 5*time.Second); wk != (Wake{Shard: 0, Due: due}) {
		t.Fatalf("wake %+v, want shard 0 due %d (shard 3 was dropped)", wk, due)
	}
	if n, err := f.rdb.PubSubNumSub(ctx, f.prefix+":wake:3", f.prefix+":wake:0").Result(); err != nil ||
		n[f.prefix+":wake:3"] != 0 || n[f.prefix+":wake:0"] != 1 {
		t.Fatalf("subscribers after dropping shard 3: %v, %v", n, err)
	}
	if err := w.Follow(ctx, []int{4}); err == nil {
		t.Fatal("follow of shard 4 of 4")
	}
	if err := w.Follow(ctx, nil); err != nil {
		t.Fatal(err)
	}
	parkOn(0)
	parkOn(1)
	// The fleet channel is still followed.
	if _, err := confirmedBeat(ctx, f.s, "r", time.Minute, 0, ""); err != nil {
		t.Fatal(err)
	}
	if wk := nextWake(t, w.C, 5*time.Second); wk != (Wake{Shard: WakeFleet, Due: 1}) {
		t.Fatalf("wake %+v, want fleet version 1 (no shard followed)", wk)
	}
	// The per-shard channel is P:wake:<s>, with the payload "<s>:<due>".
	ps := f.rdb.Subscribe(ctx, f.prefix+":wake:2")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	due = parkOn(2)
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil || msg.Payload != fmt.Sprintf("2:%d", due) {
		t.Fatalf("message on %s:wake:2 = %+v, %v", f.prefix, msg, err)
	}
}

// Concurrent Follow calls are serialised; the last one's set stands, and each returns only
// once its channels are confirmed. 1024 shards: one resync, not one per channel.
func TestWakeFollowConcurrent(t *testing.T) {
	f := setup(t, func(c *Config) { c.Shards = 1024 })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := f.s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := w.Follow(ctx, allShards(1024)[i*100:i*100+200]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := w.Follow(ctx, allShards(1024)); err != nil {
		t.Fatal(err)
	}
	firstResync(t, w.C)
	id := idsOnShard(f.s, 1000, 1, "c")[0]
	due := f.park(t, ParkRequest{ID: id, Delay: time.Hour})[0].Due
	if wk := nextWake(t, w.C, 5*time.Second); wk != (Wake{Shard: 1000, Due: due}) {
		t.Fatalf("wake %+v, want shard 1000 due %d (and no resync per shard channel)", wk, due)
	}
	n, err := f.rdb.PubSubNumSub(ctx, f.prefix+":wake:0", f.prefix+":wake:1023").Result()
	if err != nil || n[f.prefix+":wake:0"] != 1 || n[f.prefix+":wake:1023"] != 1 {
		t.Fatalf("subscribers %v, %v", n, err)
	}
}

// A Follow whose ctx ends before Redis confirmed returns ctx's error; the next Follow
// subscribes the unconfirmed channels again and waits for them.
func TestWakeFollowTimeout(t *testing.T) {
	f, srv := ownServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := f.s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Follow(ctx, []int{1}); err != nil {
		t.Fatal(err)
	}
	srv.Signal(t, syscall.SIGSTOP)
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	err = w.Follow(short, []int{1, 2})
	srv.Signal(t, syscall.SIGCONT)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("follow while Redis is stopped = %v, want DeadlineExceeded", err)
	}
	if err := w.Follow(ctx, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	if n, err := f.rdb.PubSubNumSub(ctx, f.prefix+":wake:2").Result(); err != nil || n[f.prefix+":wake:2"] != 1 {
		t.Fatalf("subscribers of shard 2: %v, %v", n, err)
	}
	done, stop2 := context.WithCancel(ctx)
	stop2()
	if err := w.Follow(done, []int{3}); !errors.Is(err, context.Canceled) {
		t.Fatalf("follow with a cancelled ctx = %v", err)
	}
}

// A reader that does not read for a while gets the wake-ups coalesced: per shard the
// earliest due, the latest fleet version; the subscription never stalls.
func TestWakeCoalesced(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := f.s.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Follow(ctx, allShards(4)); err != nil {
		t.Fatal(err)
	}
	// Fill the buffer of C with fleet versions (unread), then park on shard 1 ever earlier.
	for i := range wakeBuffer + 10 {
		if _, err := confirmedBeat(ctx, f.s, fmt.Sprintf("r%d", i), time.Minute, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	ids := idsOnShard(f.s, 1, 20, "co")
	var last int64
	for i, id := range ids {
		last = f.park(t, ParkRequest{ID: id, Delay: time.Hour - time.Duration(i)*time.Minute})[0].Due
	}
	// Wait until the parks' wakes reached the queue: a marker park on shard 2 comes after.
	marker := f.park(t, ParkRequest{ID: idsOnShard(f.s, 2, 1, "mk")[0], Delay: time.Minute})[0].Due
	var got []Wake
	for {
		wk := nextWake(t, w.C, 5*time.Second)
		got = append(got, wk)
		if wk.Shard == 2 {
			break
		}
	}
	var shard1 []Wake
	fleetMax := int64(0)
	for _, wk := range got {
		switch wk.Shard {
		case 1:
			shard1 = append(shard1, wk)
		case WakeFleet:
			fleetMax = max(fleetMax, wk.Due)
		}
	}
	if got[len(got)-1].Due != marker || fleetMax != wakeBuffer+10 || len(shard1) == 0 || shard1[len(shard1)-1].Due != last ||
		len(shard1) == len(ids) {
		t.Fatalf("%d wakes (shard 1: %v), fleet up to %d: want the latest fleet version %d, shard 1's earliest due %d last, coalesced",
			len(got), shard1, fleetMax, wakeBuffer+10, last)
	}
}

// confirmedBeat is a heartbeat that counts: when the answer is not confirmed (token was
// not the one of the id's last answer), it sends the next one at once with the new token,
// as egress does.
func confirmedBeat(ctx context.Context, s *Store, id string, ttl time.Duration, known int64, token string) (Members, error) {
	m, err := s.Heartbeat(ctx, id, ttl, known, token)
	if err != nil || m.Confirmed {
		return m, err
	}
	return s.Heartbeat(ctx, id, ttl, known, m.Token)
}

// A heartbeat renews a member only when it shows the token of the member's previous
// answer: a replica whose answers are lost (a connection that stalls on the way back)
// keeps reaching Redis but expires, and one that never got an answer never becomes live.
// One lost answer costs one extra round trip, no expiry.
func TestFleetUnconfirmedHeartbeatRenewsNothing(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	first, err := f.s.Heartbeat(ctx, "r1", 400*time.Millisecond, 0, "")
	if err != nil || first.Confirmed || first.Token == "" || slices.Contains(first.IDs, "r1") {
		t.Fatalf("first heartbeat = %+v, %v: want unconfirmed, a token, not live", first, err)
	}
	live, err := f.s.Heartbeat(ctx, "r1", 400*time.Millisecond, 0, first.Token)
	if err != nil || !live.Confirmed || !slices.Equal(live.IDs, []string{"r1"}) {
		t.Fatalf("heartbeat with the token = %+v, %v: want confirmed and live", live, err)
	}
	// One lost answer: the next heartbeat shows an old token (unconfirmed), the one after it
	// the new token (confirmed); r1 stayed live throughout.
	lost, err := f.s.Heartbeat(ctx, "r1", 400*time.Millisecond, live.Version, first.Token)
	if err != nil || lost.Confirmed || lost.Changed {
		t.Fatalf("heartbeat after a lost answer = %+v, %v", lost, err)
	}
	if again, err := f.s.Heartbeat(ctx, "r1", 400*time.Millisecond, live.Version, lost.Token); err != nil || !again.Confirmed || again.Changed {
		t.Fatalf("heartbeat after that = %+v, %v: want confirmed, no membership change", again, err)
	}
	// Answers stall: every heartbeat reaches Redis with a stale token. r1 expires, and a
	// replica that never saw an answer ("r2") never joins.
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, err := f.s.Heartbeat(ctx, "r1", 400*time.Millisecond, 0, "stale"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.Heartbeat(ctx, "r2", 400*time.Millisecond, 0, ""); err != nil {
			t.Fatal(err)
		}
		ids, err := f.rdb.ZRange(ctx, "{"+f.prefix+":fleet}:members", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ids, "r2") {
			t.Fatalf("a member that never showed a token is live: %v", ids)
		}
		if len(ids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("r1 still live after 3 s of unconfirmed heartbeats: %v", ids)
		}
		time.Sleep(50 * time.Millisecond) // heartbeat pace
	}
	// Leave clears the pending entry and the token.
	for _, id := range []string{"r1", "r2"} {
		if err := f.s.Leave(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := f.rdb.HLen(ctx, "{"+f.prefix+":fleet}:tokens").Result(); err != nil || n != 0 {
		t.Fatalf("tokens left after leave: %d, %v", n, err)
	}
	if n, err := f.rdb.ZCard(ctx, "{"+f.prefix+":fleet}:pending").Result(); err != nil || n != 0 {
		t.Fatalf("pending entries left after leave: %d, %v", n, err)
	}
}

// LiveMembers counts the members whose time has not run out.
func TestLiveMembers(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	for _, id := range []string{"a", "b"} {
		if _, err := confirmedBeat(ctx, f.s, id, time.Minute, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := f.s.LiveMembers(ctx, time.Now()); err != nil || n != 2 {
		t.Fatalf("live %d, %v; want 2", n, err)
	}
	if n, err := f.s.LiveMembers(ctx, time.Now().Add(2*time.Minute)); err != nil || n != 0 {
		t.Fatalf("live 2 minutes later %d, %v; want 0", n, err)
	}
}
