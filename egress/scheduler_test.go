package egress

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/clock"
)

// fakeDelivery is a deliver func for the scheduler alone: it records what it is handed
// and settles it with acks, at once or, while held, when released.
type fakeDelivery struct {
	mu      sync.Mutex
	n       int // messages handed, over all calls
	got     map[string]delaystore.Claimed
	at      map[string]int64 // local unix ms when handed
	held    bool
	pending []func()
}

func newFakeDelivery() *fakeDelivery {
	return &fakeDelivery{got: map[string]delaystore.Claimed{}, at: map[string]int64{}}
}

func (f *fakeDelivery) deliver(_ context.Context, b batch, settle func(*settlement)) {
	st := &settlement{shard: b.shard, n: len(b.claimed), fence: b.fence}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n += len(b.claimed)
	for _, c := range b.claimed {
		f.got[c.ID] = c
		f.at[c.ID] = time.Now().UnixMilli()
		st.acks = append(st.acks, c.Receipt)
	}
	done := func() { settle(st) }
	if f.held {
		f.pending = append(f.pending, done)
		return
	}
	go done()
}

func (f *fakeDelivery) handed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// lateness is the median and the 99th percentile, in ms, of handed time minus due time
// over the messages handed (the local and the Redis clock are the same machine's).
func (f *fakeDelivery) lateness() (p50, p99 float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	late := make([]int64, 0, len(f.got))
	for id, c := range f.got {
		late = append(late, f.at[id]-c.Due)
	}
	if len(late) == 0 {
		return 0, 0
	}
	slices.Sort(late)
	pct := func(p float64) float64 { return float64(late[min(len(late)-1, int(float64(len(late))*p))]) }
	return pct(0.50), pct(0.99)
}

func (f *fakeDelivery) release() {
	f.mu.Lock()
	p := f.pending
	f.pending, f.held = nil, false
	f.mu.Unlock()
	for _, done := range p {
		go done()
	}
}

// startScheduler runs a scheduler alone over st (every shard owned), on a local clock
// an hour ahead (its decisions map the Redis clock onto it), handing to deliver. It
// returns a cancel and a channel closed when run returned.
func startScheduler(t *testing.T, st *delaystore.Store, deliver deliverFunc) (context.CancelFunc, <-chan struct{}) {
	t.Helper()
	cfg := Config{DLQSubject: "dlq", ClaimAll: true, Now: clock.Shifted(time.Hour), DrainTimeout: 5 * time.Second}
	cfg.defaults()
	log := slog.New(slog.DiscardHandler)
	own := newOwnership(cfg.MemberID, st.Shards(), cfg.OwnershipTTL, st, log, true)
	ctx, cancel := context.WithCancel(context.Background())
	wakes, err := st.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(cfg, st, own, wakes, &redisClock{}, log, nil, deliver)
	return cancel, runScheduler(t, ctx, cancel, s, wakes)
}

// runScheduler runs s (its wake-up listener and its loop) until ctx is done, then closes
// wakes; cleanup cancels and waits. It returns a channel closed when run returned.
func runScheduler(tb testing.TB, ctx context.Context, cancel context.CancelFunc, s *scheduler, wakes io.Closer) <-chan struct{} {
	done := make(chan struct{})
	go s.listen()
	go func() {
		s.run(ctx)
		_ = wakes.Close()
		close(done)
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return done
}

// waitHanded polls until deliver was handed n messages.
func waitHanded(t *testing.T, f *fakeDelivery, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for f.handed() < n {
		if time.Now().After(deadline) {
			t.Fatalf("handed %d messages within %s, want %d", f.handed(), within, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requireEmpty polls until no shard of st has a message.
func requireEmpty(t *testing.T, st *delaystore.Store, within time.Duration) {
	t.Helper()
	shards := make([]int, st.Shards())
	for i := range shards {
		shards[i] = i
	}
	deadline := time.Now().Add(within)
	for {
		heads, _, err := st.Heads(context.Background(), shards)
		if err != nil {
			t.Fatal(err)
		}
		left := 0
		for _, h := range heads {
			if h >= 0 {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d shards still hold messages after %s: the acks were not settled", left, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSchedulerAlone: the scheduler with a fake deliver func on a real store claims every
// message once, none before its due time (Redis decides it, whatever the injected local
// clock says), and settles what deliver hands back (the store is left empty).
func TestSchedulerAlone(t *testing.T) {
	st := storetest.New(t, 10*time.Second)
	f := newFakeDelivery()
	startScheduler(t, st, f.deliver)
	const n = 40
	for i := range n {
		park(t, st, "m"+strconv.Itoa(i), time.Duration(i%8)*50*time.Millisecond, "nats:t", nil)
	}
	waitHanded(t, f, n, 10*time.Second)
	f.mu.Lock()
	if f.n != n || len(f.got) != n {
		t.Errorf("handed %d messages, %d distinct; want %d once each", f.n, len(f.got), n)
	}
	for id, c := range f.got {
		if at := f.at[id]; at < c.Due-2 { // local and Redis clocks of one host: ms rounding
			t.Errorf("%s handed at %d, before its due time %d", id, at, c.Due)
		}
	}
	f.mu.Unlock()
	requireEmpty(t, st, 5*time.Second)
}

// TestSchedulerDrains: after ctx ends, run returns only once every message handed to
// deliver came back settled, and that settlement reaches the store.
func TestSchedulerDrains(t *testing.T) {
	st := storetest.New(t, 10*time.Second)
	f := newFakeDelivery()
	f.held = true
	cancel, done := startScheduler(t, st, f.deliver)
	for i := range 10 {
		park(t, st, "d"+strconv.Itoa(i), 0, "nats:t", nil)
	}
	waitHanded(t, f, 10, 10*time.Second)
	cancel()
	select {
	case <-done:
		t.Fatal("run returned with settlements still out")
	case <-time.After(200 * time.Millisecond):
	}
	f.release()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after the settlements came back")
	}
	requireEmpty(t, st, time.Second)
}
