package delaystore

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

// heldByOf is every listed message's id -> held by.
func heldByOf(t *testing.T, f *fixture) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range scanAll(t, f.s) {
		if _, dup := out[l.ID]; dup {
			t.Fatalf("%s listed twice", l.ID)
		}
		out[l.ID] = l.HeldBy
	}
	return out
}

// TestOrderingKeyReplaceHeadCycles: the head of a key replaced 100 times while two
// successors wait stays one entry and the head; the successors stay held in their order
// and are released one by one by the acks.
func TestOrderingKeyReplaceHeadCycles(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	f.park(t, keyed("h", "k"), keyed("s1", "k"), keyed("s2", "k"))
	for i := range 100 {
		r := keyed("h", "k")
		r.Envelope.Payload = []byte(fmt.Sprint("v", i))
		if p := f.park(t, r); !p[0].Existed {
			t.Fatalf("replace %d of h: %+v, want it to replace", i, p[0])
		}
	}
	if got, want := heldByOf(t, f), map[string]string{"h": "", "s1": "h", "s2": "s1"}; !maps.Equal(got, want) {
		t.Fatalf("after 100 replaces of the head: held by %v, want %v", got, want)
	}
	for _, want := range []string{"h", "s1", "s2"} {
		c := f.claimShard(t, sh)
		if got := claimedIDs(c); !slices.Equal(got, []string{want}) {
			t.Fatalf("claimed %v, want [%s]", got, want)
		}
		if want == "h" && string(c[0].Envelope.Payload) != "v99" {
			t.Fatalf("h delivered as %q, want the last version v99", c[0].Envelope.Payload)
		}
		f.ack(t, c...)
	}
}

// TestOrderingKeyRekeyCycle: an id re-keyed A -> B -> A (keys of one shard, so the park
// replaces the entry and moves it): leaving A as its head releases A's next; joining B
// it is B's head (B is empty); back on A it goes to the end of A, held by the message
// that became A's head, and is released by that one's ack. No entry is listed twice.
func TestOrderingKeyRekeyCycle(t *testing.T) {
	f := setup(t)
	a := "key-a"
	sh := f.s.ShardOfKey(a)
	b := ""
	for i := 0; b == ""; i++ {
		if k := fmt.Sprintf("key-b%d", i); f.s.ShardOfKey(k) == sh {
			b = k
		}
	}
	f.park(t, keyed("x", a), keyed("y", a))
	if got, want := heldByOf(t, f), map[string]string{"x": "", "y": "x"}; !maps.Equal(got, want) {
		t.Fatalf("parked: held by %v, want %v", got, want)
	}
	f.park(t, keyed("x", b))
	if got, want := heldByOf(t, f), map[string]string{"x": "", "y": ""}; !maps.Equal(got, want) {
		t.Fatalf("x re-keyed to B: held by %v, want %v (y released, x B's head)", got, want)
	}
	f.park(t, keyed("x", a))
	if got, want := heldByOf(t, f), map[string]string{"x": "y", "y": ""}; !maps.Equal(got, want) {
		t.Fatalf("x back on A: held by %v, want %v", got, want)
	}
	for range 20 { // and round again, many times: still one entry each, x last
		f.park(t, keyed("x", b))
		f.park(t, keyed("x", a))
	}
	if got, want := heldByOf(t, f), map[string]string{"x": "y", "y": ""}; !maps.Equal(got, want) {
		t.Fatalf("after 20 more cycles: held by %v, want %v", got, want)
	}
	if n, err := f.rdb.ZCard(t.Context(), f.s.keys[sh].k).Result(); err != nil || n != 2 {
		t.Fatalf("chain members %d (%v), want 2", n, err)
	}
	for _, want := range []string{"y", "x"} {
		c := f.claimShard(t, sh)
		if got := claimedIDs(c); !slices.Equal(got, []string{want}) {
			t.Fatalf("claimed %v, want [%s]", got, want)
		}
		f.ack(t, c...)
	}
	if z, m := f.counts(t); z != 0 || m != 0 {
		t.Fatalf("left z %d m %d", z, m)
	}
}
