package delaystore

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// debounced is a replace of id due after delay, with max wait mw (0: without one) and
// payload p.
func debounced(id string, delay, mw time.Duration, p byte) ParkRequest {
	e := sampleEnvelope(int(p))
	e.MaxWait = mw
	return ParkRequest{ID: id, Replace: true, Delay: delay, Envelope: e}
}

// bound reads id's stored max wait and bound (Get), failing t when id is not parked.
func (f *fixture) bound(t *testing.T, id string) (time.Duration, int64) {
	t.Helper()
	m, err := f.s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return m.Envelope.MaxWait, m.Envelope.DueBy
}

// pass polls the Redis clock until it is later than ms, so that a park after it is
// parked strictly later than the one that fixed ms.
func (f *fixture) pass(t *testing.T, ms int64) int64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if now := f.now(t); now > ms {
			return now
		}
		time.Sleep(time.Millisecond) // poll interval
	}
	t.Fatalf("redis time did not pass %d", ms)
	return 0
}

// TestDebounceBound: a debounced message is due no later than the time its first version
// was parked plus its max wait, and the bound carries over replacements (with the header,
// which counts its own max wait from that first parking; without it, which keeps the
// bound), in one park call too; a recurring replacement drops it; after a cancel, a
// delivery, or a replace of a version in delivery, the next version starts a new bound.
// The listing shows the bound.
func TestDebounceBound(t *testing.T) {
	f := setup(t)
	const mw = 10 * time.Second

	before := f.now(t)
	p := f.park(t, debounced("d", time.Hour, mw, 1))[0]
	after := f.now(t)
	first := p.Due - mw.Milliseconds()
	if first < before || first > after {
		t.Fatalf("first version due %d: want parking time (%d..%d) + %s", p.Due, before, after, mw)
	}
	if w, by := f.bound(t, "d"); w != mw || by != p.Due {
		t.Fatalf("stored bound %s, %d; want %s, %d", w, by, mw, p.Due)
	}
	by := p.Due

	f.pass(t, first)
	if p := f.park(t, debounced("d", time.Hour, mw, 2))[0]; p.Due != by || !p.Existed || p.InDelivery {
		t.Fatalf("replacement with the header: %+v, want due %d (the first version's bound)", p, by)
	}
	if p := f.park(t, debounced("d", time.Hour, 0, 3))[0]; p.Due != by {
		t.Fatalf("replacement without the header: due %d, want the pending bound %d", p.Due, by)
	}
	if w, got := f.bound(t, "d"); w != mw || got != by {
		t.Fatalf("bound after a replacement without the header: %s, %d; want %s, %d", w, got, mw, by)
	}
	now := f.now(t)
	if p := f.park(t, debounced("d", time.Second, 0, 4))[0]; p.Due < now+1000 || p.Due >= by {
		t.Fatalf("replacement due before the bound: due %d, want its own (>= %d, < %d)", p.Due, now+1000, by)
	}
	if p := f.park(t, debounced("d", time.Hour, 2*mw, 5))[0]; p.Due != first+2*mw.Milliseconds() {
		t.Fatalf("replacement with a longer max wait: due %d, want first parking %d + %s", p.Due, first, 2*mw)
	}
	if p := f.park(t, debounced("d", time.Hour, mw, 6))[0]; p.Due != by {
		t.Fatalf("replacement with the first max wait again: due %d, want %d", p.Due, by)
	}
	listed := false
	for _, e := range scanAll(t, f.s) {
		if e.ID == "d" {
			listed = e.MaxWait == mw && e.DueBy == by && e.Due == by
		}
	}
	if !listed {
		t.Fatalf("the listing does not show d with max wait %s and bound %d: %+v", mw, by, scanAll(t, f.s))
	}

	// Two versions in one park call: the second keeps the bound the first fixed.
	ps := f.park(t, debounced("batch", time.Hour, mw, 1), debounced("batch", time.Hour, 0, 2))
	if ps[1].Due != ps[0].Due || ps[1].Due > f.now(t)+mw.Milliseconds() {
		t.Fatalf("one call: dues %d, %d; want both the first version's bound", ps[0].Due, ps[1].Due)
	}

	// A recurring replacement without the header does not take the bound.
	rec := debounced("d", time.Hour, 0, 7)
	rec.Envelope.Every = "1h"
	if p := f.park(t, rec)[0]; p.Due == by {
		t.Fatalf("recurring replacement took the bound: due %d", p.Due)
	}
	if w, got := f.bound(t, "d"); w != 0 || got != 0 {
		t.Fatalf("recurring replacement stored a bound %s, %d", w, got)
	}

	t.Run("cancel", func(t *testing.T) {
		p := f.park(t, debounced("c", time.Hour, mw, 1))[0]
		if ok, err := f.s.Cancel(t.Context(), "c"); !ok || err != nil {
			t.Fatalf("cancel = %v, %v", ok, err)
		}
		now := f.pass(t, p.Due-mw.Milliseconds())
		if p2 := f.park(t, debounced("c", time.Hour, mw, 2))[0]; p2.Due < now+mw.Milliseconds() {
			t.Fatalf("after a cancel: due %d, want a new bound >= %d (the old one was %d)", p2.Due, now+mw.Milliseconds(), p.Due)
		}
	})

	t.Run("published after the cancel", func(t *testing.T) {
		// cancel.lua finds the source time stored after the bound field (headersAt).
		r := debounced("s", time.Hour, mw, 1)
		r.Published = 2000
		f.park(t, r)
		if ok, err := f.s.CancelAt(t.Context(), "s", 1000); ok || err != nil {
			t.Fatalf("cancel before its publish = %v, %v; want kept", ok, err)
		}
		if w, _ := f.bound(t, "s"); w != mw {
			t.Fatalf("kept message's max wait %s", w)
		}
	})

	t.Run("delivered", func(t *testing.T) {
		f.park(t, debounced("a", 0, mw, 1))
		m, _ := f.claimID(t, "a", 5*time.Second)
		if a, err := f.s.Ack(t.Context(), []Receipt{m.Receipt}); err != nil || a.N != 1 {
			t.Fatalf("ack = %+v, %v", a, err)
		}
		now := f.pass(t, m.Envelope.DueBy-mw.Milliseconds())
		if p := f.park(t, debounced("a", time.Hour, mw, 2))[0]; p.Existed || p.Due < now+mw.Milliseconds() {
			t.Fatalf("after delivery: %+v, want a new message with a new bound >= %d (the old one was %d)", p, now+mw.Milliseconds(), m.Envelope.DueBy)
		}
	})

	t.Run("in delivery", func(t *testing.T) {
		f.park(t, debounced("i", 0, mw, 1))
		m, _ := f.claimID(t, "i", 5*time.Second)
		now := f.pass(t, m.Envelope.DueBy-mw.Milliseconds())
		p := f.park(t, debounced("i", time.Hour, mw, 2))[0]
		if !p.InDelivery || p.Due < now+mw.Milliseconds() {
			t.Fatalf("replace in delivery: %+v, want InDelivery and a new bound >= %d (the claimed one's was %d)", p, now+mw.Milliseconds(), m.Envelope.DueBy)
		}
		f.park(t, debounced("j", 0, mw, 1))
		f.claimID(t, "j", 5*time.Second)
		if p := f.park(t, debounced("j", time.Hour, 0, 2))[0]; !p.InDelivery {
			t.Fatalf("replace in delivery without the header: %+v, want InDelivery", p)
		}
		if w, got := f.bound(t, "j"); w != 0 || got != 0 {
			t.Fatalf("a replace without the header of a version in delivery kept its bound %s, %d", w, got)
		}
	})
}

// The dev mode's miniredis (gopher-lua, no struct library) fixes and carries a bound as
// Redis does.
func TestDebounceMiniredis(t *testing.T) {
	s := miniredisStore(t, miniredis.RunT(t), Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	const mw = 10 * time.Second
	first, err := s.Park(t.Context(), []ParkRequest{debounced("d", time.Hour, mw, 1)})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Park(t.Context(), []ParkRequest{debounced("d", time.Hour, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Get(t.Context(), "d")
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Due != first[0].Due || m.Envelope.MaxWait != mw || m.Envelope.DueBy != first[0].Due || m.Envelope.Payload[5] != 2 {
		t.Fatalf("dues %d, %d, stored %s, %d (payload %v); want the first bound carried", first[0].Due, again[0].Due,
			m.Envelope.MaxWait, m.Envelope.DueBy, m.Envelope.Payload)
	}
}
