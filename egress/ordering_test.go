package egress

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/clock"
)

// keyedEgress runs a scheduler over st (every shard owned, lease 30 s) with the ack hold
// hold, handing to a real delivery that publishes to pub, through an ackRecorder. It
// returns the recorder and the registry of the egress metrics.
func keyedEgress(t *testing.T, st *delaystore.Store, pub message.Publisher, hold time.Duration) (*ackRecorder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DLQSubject: "dlq", ClaimAll: true, Now: clock.Shifted(time.Hour), DrainTimeout: 5 * time.Second, Lease: 30 * time.Second}
	cfg.defaults()
	log := slog.New(slog.DiscardHandler)
	rc := &redisClock{}
	d, err := newDelivery(cfg, map[string]message.Publisher{"nats": pub}, nil, rc, log, m)
	if err != nil {
		t.Fatal(err)
	}
	rec := &ackRecorder{Store: st, settledAt: map[string]time.Time{}}
	own := newOwnership(cfg.MemberID, st.Shards(), cfg.OwnershipTTL, st, log, true)
	ctx, cancel := context.WithCancel(context.Background())
	wakes, err := st.Wakeups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := newScheduler(cfg, rec, own, wakes, rc, log, m, d.submit)
	s.ackHold = hold
	runScheduler(t, ctx, cancel, s, wakes)
	return rec, reg
}

// parkKeyed parks id with ordering key key for nats:out, due at (unix ms, Redis clock;
// 0: now), and returns its due time.
func parkKeyed(t *testing.T, st *delaystore.Store, id, key string, at int64) int64 {
	t.Helper()
	p, err := st.Park(context.Background(), []delaystore.ParkRequest{{ID: id, Replace: true, Absolute: at > 0, At: at,
		Envelope: delaystore.Envelope{Target: "nats:out", Source: "nats:delay.in", OrderingKey: key, Payload: []byte(id)}}})
	if err != nil {
		t.Fatal(err)
	}
	return p[0].Due
}

// receiveIDs waits for n messages on out and returns their ids, in arrival order.
func receiveIDs(t *testing.T, out chan got, n int, within time.Duration) []string {
	t.Helper()
	var ids []string
	deadline := time.Now().Add(within)
	for len(ids) < n {
		ids = append(ids, waitFor(t, out, time.Until(deadline)).msg.Metadata.Get(contract.HeaderID))
	}
	return ids
}

// TestKeyedAcksNotHeld: the ack of a message with an ordering key is not held (it
// releases the key's next message): a chain of 5 keyed messages due now is published in
// its order, with an ack hold of a minute (and a lease of 30 s, so a held ack would go
// after 15 s: the chain would take over a minute). One claim takes the first; each ack
// leases the next (Exchanged.Released), so no other claim is needed.
func TestKeyedAcksNotHeld(t *testing.T) {
	st := storetest.New(t, 30*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "out")
	rec, _ := keyedEgress(t, st, gc, time.Minute)
	var want []string
	for i := range 5 {
		id := "o" + strconv.Itoa(i)
		parkKeyed(t, st, id, "order-1", 0)
		want = append(want, id)
	}
	if got := receiveIDs(t, out, len(want), 10*time.Second); !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	requireEmpty(t, st, 5*time.Second)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.claimRuns != 1 || rec.ackCalls != 5 || rec.acked != 5 {
		t.Fatalf("%d claims with messages, %d acks in %d exchanges; want 1 claim, 5 acks one at a time", rec.claimRuns, rec.acked, rec.ackCalls)
	}
}

// TestHeldByOrderObserved: a message held by its key's predecessor past its due time is
// late from its release, not its due time: the time it was held goes to
// delaybridge_held_by_order_seconds, not to the lateness histogram.
func TestHeldByOrderObserved(t *testing.T) {
	st := storetest.New(t, 30*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "out")
	_, reg := keyedEgress(t, st, gc, ackHold)
	now := parkKeyed(t, st, "first", "order-1", 0)
	parkKeyed(t, st, "second", "order-1", now-5000) // due 5 s ago, held by first
	if got := receiveIDs(t, out, 2, 10*time.Second); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("published %v, want [first second]", got)
	}
	requireEmpty(t, st, 5*time.Second) // both settled: observed before their acks
	held, late := histogram(t, reg, "delaybridge_held_by_order_seconds"), histogram(t, reg, "delaybridge_delivery_lateness_seconds")
	if held.GetSampleCount() != 1 || held.GetSampleSum() < 5 {
		t.Errorf("held by order: %d observations, sum %gs; want second's hold of 5s or more", held.GetSampleCount(), held.GetSampleSum())
	}
	if late.GetSampleCount() != 2 || late.GetSampleSum() >= 5 {
		t.Errorf("lateness: %d observations, sum %gs; want 2, without the hold of 5s", late.GetSampleCount(), late.GetSampleSum())
	}
}

// histogram returns the histogram name of reg (one series).
func histogram(t *testing.T, reg *prometheus.Registry, name string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no histogram %s", name)
	return nil
}
