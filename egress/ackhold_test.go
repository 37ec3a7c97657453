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

// TestAcksHeld (issue 26 item 2): with a hold set, completed acks are held that long before they go (with a
// claim or alone), so that the acks of several claims share one script run; every
// message is still acked (the store ends empty) and handed once.
func TestAcksHeld(t *testing.T) {
	st := storetest.New(t, 10*time.Second)
	rec := &ackRecorder{Store: st, settledAt: map[string]time.Time{}}
	f := newFakeDelivery()
	cfg := Config{DLQSubject: "dlq", ClaimAll: true, Now: clock.Shifted(time.Hour), DrainTimeout: 5 * time.Second}
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
	const hold = 8 * time.Millisecond // ackHold is off by default
	s.ackHold = hold
	runScheduler(t, ctx, cancel, s, wakes)
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
	if rec.youngest < hold {
		t.Fatalf("an Exchange carried an ack settled %s before it; want >= the hold (%s)", rec.youngest, hold)
	}
	t.Logf("%d acks in %d script runs", rec.acked, rec.ackCalls)
}
