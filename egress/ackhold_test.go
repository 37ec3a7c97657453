package egress

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/clock"
)

// ackRecorder is the store seen by a scheduler under test: it notes when each ack was
// settled by delivery and, for every Exchange that carries acks, the age of its oldest.
type ackRecorder struct {
	*delaystore.Store
	mu        sync.Mutex
	settledAt map[string]time.Time // receipt id -> when delivery settled it
	youngest  time.Duration        // the least age of the oldest ack of any ack-carrying Exchange
	ackCalls  int
	acked     int
	claimed   int
	claimRuns int // shard claims that returned messages
}

func (r *ackRecorder) Exchange(ctx context.Context, acks []delaystore.Receipt, retries []delaystore.RetryRequest,
	claims []delaystore.ClaimRequest) delaystore.Exchanged {
	r.mu.Lock()
	if len(acks) > 0 {
		var oldest time.Time
		for _, a := range acks {
			if at := r.settledAt[a.ID]; oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
		if age := time.Since(oldest); r.ackCalls == 0 || age < r.youngest {
			r.youngest = age
		}
		r.ackCalls++
		r.acked += len(acks)
	}
	r.mu.Unlock()
	x := r.Store.Exchange(ctx, acks, retries, claims)
	r.mu.Lock()
	for _, c := range x.Claims {
		r.claimed += len(c.Messages)
		if len(c.Messages) > 0 {
			r.claimRuns++
		}
	}
	r.mu.Unlock()
	return x
}

// settle wraps delivery's settle: it notes the time of each ack first.
func (r *ackRecorder) settle(settle func(*settlement)) func(*settlement) {
	return func(st *settlement) {
		r.mu.Lock()
		for _, a := range st.acks {
			r.settledAt[a.ID] = time.Now()
		}
		r.mu.Unlock()
		settle(st)
	}
}

// holdScheduler runs a scheduler over st (every shard owned) with the ack hold hold,
// Config.Lease lease (the store's) and Config.BatchSize batchSize (0: the default), handing to
// a fake delivery that acks at once, through an ackRecorder. It returns the fake, the
// recorder, and runScheduler's cancel and done.
func holdScheduler(t *testing.T, st *delaystore.Store, hold, lease time.Duration, batchSize int) (*fakeDelivery, *ackRecorder, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	return recordedScheduler(t, st, Config{Lease: lease, BatchSize: batchSize}, hold)
}

// recordedScheduler is holdScheduler with more of cfg: its Lease, BatchSize and ClaimAhead.
func recordedScheduler(t *testing.T, st *delaystore.Store, cfg Config, hold time.Duration) (*fakeDelivery, *ackRecorder, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	rec := &ackRecorder{Store: st, settledAt: map[string]time.Time{}}
	f := newFakeDelivery()
	cfg.DLQSubject, cfg.ClaimAll, cfg.Now, cfg.DrainTimeout = "dlq", true, clock.Shifted(time.Hour), 5*time.Second
	cfg.defaults()
	log := slog.New(slog.DiscardHandler)
	own := newOwnership(cfg.MemberID, st.Shards(), cfg.OwnershipTTL, st, log, true)
	ctx, cancel := context.WithCancel(context.Background())
	wakes, err := st.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(cfg, rec, own, wakes, &redisClock{}, log, nil,
		func(ctx context.Context, b batch, settle func(*settlement)) { f.deliver(ctx, b, rec.settle(settle)) })
	s.ackHold = hold
	return f, rec, cancel, runScheduler(t, ctx, cancel, s, wakes)
}

// TestAcksHeld (issue 26 item 2): completed acks are held ackHold (the default) before
// they go (with a claim or alone), so that the acks of several claims share one script
// run; every message is still acked (the store ends empty) and handed once.
func TestAcksHeld(t *testing.T) {
	st := storetest.New(t, 10*time.Second)
	f, rec, _, _ := holdScheduler(t, st, ackHold, 10*time.Second, 0)
	const n = 60
	for i := range n { // due 2 ms apart: one claim each, when the machine keeps up
		park(t, st, "h"+strconv.Itoa(i), 200*time.Millisecond+time.Duration(i)*2*time.Millisecond, "nats:t", nil)
	}
	waitHanded(t, f, n, 10*time.Second)
	requireEmpty(t, st, 5*time.Second)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.acked != n || rec.claimed != n {
		t.Fatalf("acked %d, claimed %d; want %d each", rec.acked, rec.claimed, n)
	}
	if rec.youngest < ackHold {
		t.Fatalf("an Exchange carried an ack settled %s before it; want >= the hold (%s)", rec.youngest, ackHold)
	}
	t.Logf("%d acks in %d script runs", rec.acked, rec.ackCalls)
}

// TestAckHoldClaimsGoOn: while acks are held (a hold of a minute), due messages are
// still claimed and handed as they come due (no claim waits for the acks), and shutdown
// sends the held acks before run returns.
func TestAckHoldClaimsGoOn(t *testing.T) {
	st := storetest.New(t, 30*time.Second)
	f, rec, cancel, done := holdScheduler(t, st, time.Minute, 30*time.Second, 0)
	const n = 20
	for i := range n {
		park(t, st, "c"+strconv.Itoa(i), 100*time.Millisecond+time.Duration(i)*50*time.Millisecond, "nats:t", nil)
	}
	waitHanded(t, f, n, 10*time.Second) // the hold and half the lease (15 s) are later
	rec.mu.Lock()
	calls := rec.ackCalls
	rec.mu.Unlock()
	if calls != 0 {
		t.Fatalf("%d Exchanges carried acks before shutdown; want none (held a minute)", calls)
	}
	cancel()
	<-done
	rec.mu.Lock()
	acked := rec.acked
	rec.mu.Unlock()
	if acked != n {
		t.Fatalf("run returned having acked %d; want all %d (shutdown sends held acks)", acked, n)
	}
	requireEmpty(t, st, time.Second)
}

// TestAckHoldEndsWithinLease: a held ack goes by half its messages' lease whatever the
// hold, so a hold never lets a lease run out into a second delivery: with a 3 s lease
// and a hold of a minute, every message is handed once and the store ends empty.
func TestAckHoldEndsWithinLease(t *testing.T) {
	const lease = 3 * time.Second
	st := storetest.New(t, lease)
	f, rec, _, _ := holdScheduler(t, st, time.Minute, lease, 0)
	const n = 10
	for i := range n {
		park(t, st, "l"+strconv.Itoa(i), 100*time.Millisecond, "nats:t", nil)
	}
	waitHanded(t, f, n, 10*time.Second)
	requireEmpty(t, st, 3*lease)
	time.Sleep(lease) // a lease run out would hand them again
	if got := f.handed(); got != n {
		t.Fatalf("handed %d times; want %d (an ack held past the lease)", got, n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.acked != n {
		t.Fatalf("acked %d; want %d", rec.acked, n)
	}
}

// TestAckHoldLiftedByCapacity: when held acks fill half a shard's capacity the hold is
// lifted, so claims go on: with BatchSize 4 (16 messages per shard in flight at most) and
// a hold of a minute, 200 messages due at once are all handed long before the hold or
// half the lease (15 s) ends.
func TestAckHoldLiftedByCapacity(t *testing.T) {
	st := storetest.New(t, 30*time.Second)
	f, _, _, _ := holdScheduler(t, st, time.Minute, 30*time.Second, 4)
	const n = 200
	for i := range n {
		park(t, st, "k"+strconv.Itoa(i), 100*time.Millisecond, "nats:t", nil)
	}
	waitHanded(t, f, n, 10*time.Second)
}
