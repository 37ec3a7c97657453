package delaystore

import (
	"errors"
	"testing"
	"time"
)

// changeAll applies op with Change to every entry a Scan of the schedule reads that
// match takes (nil: all), one at a time, and returns how many were changed.
func (f *fixture) changeAll(t *testing.T, op BulkOp, match func(Scanned) bool) int64 {
	t.Helper()
	var changed int64
	for _, l := range scanAll(t, f.s) {
		if match != nil && !match(l) {
			continue
		}
		c, err := f.s.Change(t.Context(), f.s.ShardOf(l.ID), op, []Pick{l.Pick()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		changed += c.N
	}
	return changed
}

// TestCancelInDelivery: what a cancel and a replace answer
// in each state of an entry. Claimed (a live lease, claimed ahead or due): the cancel
// answers ErrInDelivery and deletes nothing, but is remembered; a replace answers
// InDelivery. Waiting for a retry, put back, or with its lease run out: in no replica's
// hands, so the cancel deletes it (true) and a replace answers without InDelivery. A
// retried message claimed again is in delivery again, and a bulk change leaves it.
func TestCancelInDelivery(t *testing.T) {
	f := setup(t, func(c *Config) { c.Lease = time.Second })
	claim := func(id string) Claimed {
		t.Helper()
		m, _ := f.claimID(t, id, 2*time.Second)
		return m
	}
	inDelivery := func(id string) {
		t.Helper()
		var busy *InDeliveryError
		if ok, err := f.s.Cancel(t.Context(), id); ok || !errors.As(err, &busy) || busy.Stopped || busy.ID != id {
			t.Fatalf("cancel %s = %v, %v; want an InDeliveryError", id, ok, err)
		}
		if _, err := f.s.Get(t.Context(), id); err != nil {
			t.Fatalf("%s after a cancel in delivery: %v, want kept", id, err)
		}
	}
	cancelled := func(id string) {
		t.Helper()
		if ok, err := f.s.Cancel(t.Context(), id); !ok || err != nil {
			t.Fatalf("cancel %s = %v, %v; want cancelled", id, ok, err)
		}
	}
	replace := func(id string) Parked {
		t.Helper()
		return f.park(t, ParkRequest{ID: id, Replace: true, Delay: time.Hour, Envelope: sampleEnvelope(1)})[0]
	}

	// Claimed: kept, and remembered (an older message of the id arriving later is dropped).
	f.park(t, ParkRequest{ID: "due", Replace: true, Envelope: sampleEnvelope(2)})
	m := claim("due")
	inDelivery("due")
	if a, err := f.s.Ack(t.Context(), []Receipt{m.Receipt}); err != nil || a.N != 1 {
		t.Fatalf("ack after a cancel in delivery = %+v, %v; want it acked", a, err)
	}
	if p := f.park(t, ParkRequest{ID: "due", Replace: true, Published: 1, Envelope: sampleEnvelope(2)}); !p[0].Cancelled {
		t.Fatalf("an older message after a cancel in delivery: %+v, want Cancelled (remembered)", p[0])
	}

	// Replace of a claimed entry: InDelivery; its holder's ack is fenced (version).
	f.park(t, ParkRequest{ID: "swap", Replace: true, Envelope: sampleEnvelope(3)})
	m = claim("swap")
	if p := replace("swap"); !p.InDelivery || !p.Existed {
		t.Fatalf("replace of a claimed entry: %+v, want InDelivery", p)
	}
	if a, _ := f.s.Ack(t.Context(), []Receipt{m.Receipt}); a.N != 0 {
		t.Fatalf("the replaced version's ack applied: %+v", a)
	}
	if p := replace("swap"); p.InDelivery || !p.Existed {
		t.Fatalf("replace of a waiting entry: %+v, want no InDelivery", p)
	}

	// Waiting for a retry, then claimed again, then put back.
	f.park(t, ParkRequest{ID: "retried", Replace: true, Envelope: sampleEnvelope(4)})
	m = claim("retried")
	if _, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Backoff: 50 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if p := replace("retried"); p.InDelivery {
		t.Fatalf("replace of an entry waiting for its retry: %+v, want no InDelivery", p)
	}
	f.park(t, ParkRequest{ID: "retried", Replace: true, Envelope: sampleEnvelope(4)})
	m = claim("retried")
	if _, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Backoff: 50 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	m = claim("retried") // a retried message claimed again: in delivery
	inDelivery("retried")
	if changed := f.changeAll(t, BulkOp{Kind: BulkCancel}, nil); changed != 1 { // "swap" (waiting) only
		t.Fatalf("bulk cancel changed %d; want only the waiting entry", changed)
	}
	if _, err := f.s.Get(t.Context(), "retried"); err != nil {
		t.Fatalf("bulk cancel changed a retried message claimed again: %v", err)
	}
	if _, err := f.s.Retry(t.Context(), []RetryRequest{{Receipt: m.Receipt, Backoff: time.Hour, PutBack: true}}); err != nil {
		t.Fatal(err)
	}
	cancelled("retried") // put back: in no replica's hands

	// Lease run out (its holder gave up at 4/5 of it): deleted.
	f.park(t, ParkRequest{ID: "expired", Replace: true, Envelope: sampleEnvelope(5)})
	m = claim("expired")
	time.Sleep(time.Until(time.UnixMilli(m.Token + 1)))
	cancelled("expired")
	if a, _ := f.s.Ack(t.Context(), []Receipt{m.Receipt}); a.N != 0 {
		t.Fatalf("ack after the cancel applied: %+v", a)
	}
}
