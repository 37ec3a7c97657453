package events

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSlowTailMisses: a tail that does not read gets TailBuffer events and the rest are
// counted missed; Emit returns for every one of them (a blocking send would hang here),
// and another tail that reads is not affected.
func TestSlowTailMisses(t *testing.T) {
	h := NewHub(nil)
	slow, err := h.Tail()
	if err != nil {
		t.Fatal(err)
	}
	fast, err := h.Tail()
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for i := range TailBuffer + 10 {
		h.Emit(Event{Type: Delivered, ID: "m", Target: "nats:a"})
		if i%2 == 0 { // fast reads as it goes, so it never fills
			for len(fast.Events()) > 0 {
				<-fast.Events()
				got++
			}
		}
	}
	if n := slow.Missed(); n != 10 {
		t.Fatalf("slow tail missed %d, want 10", n)
	}
	if n := slow.Missed(); n != 0 {
		t.Fatalf("missed count not reset: %d", n)
	}
	if n := fast.Missed(); n != 0 {
		t.Fatalf("fast tail missed %d", n)
	}
	if got+len(fast.Events()) != TailBuffer+10 {
		t.Fatalf("fast tail got %d of %d", got+len(fast.Events()), TailBuffer+10)
	}
}

// TestTailCap: MaxTails tails at once; one more is refused until one closes; Close
// twice detaches once.
func TestTailCap(t *testing.T) {
	h := NewHub(nil)
	var subs []*Sub
	for range MaxTails {
		s, err := h.Tail()
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if _, err := h.Tail(); !errors.Is(err, ErrTooManyTails) {
		t.Fatalf("tail %d: %v, want ErrTooManyTails", MaxTails+1, err)
	}
	subs[0].Close()
	subs[0].Close()
	if h.Tails() != MaxTails-1 {
		t.Fatalf("tails %d after one close (twice), want %d", h.Tails(), MaxTails-1)
	}
	if _, err := h.Tail(); err != nil {
		t.Fatalf("after a close: %v", err)
	}
	for _, s := range subs[1:] {
		s.Close()
	}
}

// TestEmitWithoutSubscribers: nothing attached, nothing kept; Active follows the
// subscribers; Remote reaches tails only, never the relay's outbound subscriber.
func TestEmitWithoutSubscribers(t *testing.T) {
	h := NewHub(func() time.Time { return time.UnixMilli(42) })
	h.Emit(Event{Type: Delivered})
	if h.Active() {
		t.Fatal("active without subscribers")
	}
	out := h.outbound(4)
	tail, _ := h.Tail()
	h.Remote(Event{Type: Delivered, ID: "remote"})
	h.Emit(Event{Type: Delivered, ID: "local"})
	if len(out.Events()) != 1 || (<-out.Events()).ID != "local" {
		t.Fatal("outbound subscriber got a remote event or missed the local one")
	}
	if e1, e2 := <-tail.Events(), <-tail.Events(); e1.ID != "remote" || e2.ID != "local" || e2.At != 42 {
		t.Fatalf("tail got %+v, %+v", e1, e2)
	}
	out.Close()
	tail.Close()
	if h.Active() {
		t.Fatal("active after every subscriber closed")
	}
}

// TestAppendJSON: the hand-written encoding is what encoding/json reads back, hostile
// strings included.
func TestAppendJSON(t *testing.T) {
	for _, e := range []Event{
		{Type: Delivered, At: 1, ID: "a", Target: "nats:x", Due: 2, Attempts: 1},
		{Type: Changed, At: 3, Op: "bulk_cancel", Target: "nats:*", Count: 7},
		{Type: DeadLettered, At: 4, ID: "q\"\\\n\x00</script>\u2028\xff", Target: "kafka:t", Reason: "publish_failed"},
		{Type: Missed, At: 5, Count: 9},
	} {
		b := e.AppendJSON(nil)
		var back Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := e
		want.ID = strings.ToValidUTF8(want.ID, "\uFFFD")
		if back != want {
			t.Fatalf("round trip of %s: %+v, want %+v", b, back, want)
		}
		if strings.Contains(string(b), "<") {
			t.Fatalf("%s: '<' not escaped", b)
		}
	}
}
