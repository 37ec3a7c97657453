package delaystore

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// keyed is a park request of id with ordering key key, due now.
func keyed(id, key string) ParkRequest {
	e := sampleEnvelope(0)
	e.OrderingKey = key
	return ParkRequest{ID: id, Replace: true, Envelope: e}
}

// claimShard claims everything eligible on shard sh and returns it.
func (f *fixture) claimShard(t *testing.T, sh int) []Claimed {
	t.Helper()
	c, err := f.s.Claim(t.Context(), sh, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Messages {
		if c.Now < m.Due {
			t.Fatalf("claimed %s early: now %d < due %d", m.ID, c.Now, m.Due)
		}
	}
	return c.Messages
}

func claimedIDs(ms []Claimed) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	return ids
}

func (f *fixture) ack(t *testing.T, ms ...Claimed) {
	t.Helper()
	var rs []Receipt
	for _, m := range ms {
		rs = append(rs, m.Receipt)
	}
	if _, err := f.s.Ack(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
}

// TestOrderingKeyOneAtATime: messages of one key, all due, are claimable one at a time in
// parking order, each once its predecessor was acked; a message without key and one of
// another key are not held by them. The listing shows each one's key (also of a message
// whose headers outgrow the head a scan reads) and what holds it.
func TestOrderingKeyOneAtATime(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("order-1")
	other := idsOnShard(f.s, sh, 1, "plain")[0]
	long := keyed("c", "order-1")
	long.Envelope.Headers = append(long.Envelope.Headers, headers.Header{Key: "big", Value: strings.Repeat("x", 2*headBytes)})
	f.park(t, keyed("a", "order-1"), keyed("b", "order-1"), long,
		ParkRequest{ID: other, Envelope: sampleEnvelope(1)})
	heldBy, keys := map[string]string{}, map[string]string{}
	for _, l := range scanAll(t, f.s) {
		heldBy[l.ID], keys[l.ID] = l.HeldBy, l.OrderingKey
		if l.HeldBy != "" && l.Scheduled != l.Due {
			t.Errorf("held %s listed as scheduled %d, due %d", l.ID, l.Scheduled, l.Due)
		}
	}
	if want := map[string]string{"a": "", "b": "a", "c": "b", other: ""}; !maps.Equal(heldBy, want) {
		t.Fatalf("held by %v, want %v", heldBy, want)
	}
	if want := map[string]string{"a": "order-1", "b": "order-1", "c": "order-1", other: ""}; !maps.Equal(keys, want) {
		t.Fatalf("ordering keys %v, want %v", keys, want)
	}
	for _, want := range []string{"a", "b", "c"} {
		got := claimedIDs(f.claimShard(t, sh))
		got = slices.DeleteFunc(got, func(id string) bool { return id == other })
		if !slices.Equal(got, []string{want}) {
			t.Fatalf("claimed %v, want [%s]", got, want)
		}
		if again := f.claimShard(t, sh); len(again) != 0 {
			t.Fatalf("claimed %v while %s was unacked", claimedIDs(again), want)
		}
		f.ackID(t, sh, want)
	}
	if z, m := f.counts(t); z != 1 || m != 1 {
		t.Fatalf("left z %d m %d, want only the unkeyed message", z, m)
	}
}

// ackID acks id, claimed and leased on shard sh, by its receipt from a fresh read.
func (f *fixture) ackID(t *testing.T, sh int, id string) {
	t.Helper()
	score, err := f.rdb.ZScore(t.Context(), f.s.keys[sh].z, id).Result()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := f.rdb.HGet(t.Context(), f.s.keys[sh].m, id).Result()
	if err != nil {
		t.Fatal(err)
	}
	st, err := parseStored(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Ack(t.Context(), []Receipt{{ID: id, Shard: sh, Version: st.version, Token: int64(score)}}); err != nil {
		t.Fatal(err)
	}
}

// TestOrderingKeyCancel: cancelling a held message keeps the others' order; cancelling
// the head releases the next; a cancel without the key does not reach a keyed message.
func TestOrderingKeyCancel(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	f.park(t, keyed("a", "k"), keyed("b", "k"), keyed("c", "k"))
	if ok, err := f.s.CancelKeyAt(t.Context(), "b", "k", 0); err != nil || !ok {
		t.Fatalf("cancel held b: %v %v", ok, err)
	}
	if f.s.ShardOf("a") != sh {
		if ok, err := f.s.Cancel(t.Context(), "a"); err != nil || ok {
			t.Fatalf("cancel of a without its key: %v %v, want not found", ok, err)
		}
	}
	if ok, err := f.s.CancelKeyAt(t.Context(), "a", "k", 0); err != nil || !ok {
		t.Fatalf("cancel head a: %v %v", ok, err)
	}
	if got := claimedIDs(f.claimShard(t, sh)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("claimed %v after cancelling a and b, want [c]", got)
	}
}

// TestOrderingKeyReplace: a replace keeps its place (held stays held, the head stays the
// head); a replace of the head in delivery keeps it in delivery, and the ack of the
// replaced version makes the new one eligible, still before the next; a replace with
// another key leaves the chain.
func TestOrderingKeyReplace(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	f.park(t, keyed("a", "k"), keyed("b", "k"), keyed("c", "k"))
	f.park(t, keyed("b", "k")) // held: stays held
	c := f.claimShard(t, sh)
	if got := claimedIDs(c); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("claimed %v, want [a]", got)
	}
	p := f.park(t, keyed("a", "k")) // a in delivery: replaced, kept in delivery
	if len(f.claimShard(t, sh)) != 0 {
		t.Fatal("the replacement of a in delivery was claimable before the replaced version's ack")
	}
	_ = p
	f.ack(t, c...) // the replaced version confirmed: the new one becomes eligible
	if got := claimedIDs(f.claimShard(t, sh)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("claimed %v after the replaced a's ack, want [a] (the new version)", got)
	}
	f.ackID(t, sh, "a")
	f.park(t, keyed("c", "other")) // c leaves k's chain (not its head: nothing released)
	csh := f.s.ShardOfKey("other")
	got := claimedIDs(f.claimShard(t, sh))
	if csh == sh {
		slices.Sort(got)
		if !slices.Equal(got, []string{"b", "c"}) {
			t.Fatalf("claimed %v, want [b c]", got)
		}
		return
	}
	if !slices.Equal(got, []string{"b"}) {
		t.Fatalf("claimed %v on k's shard, want [b]", got)
	}
	if got := claimedIDs(f.claimShard(t, csh)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("claimed %v on other's shard, want [c]", got)
	}
}

// TestOrderingKeyBounds: keys of 1 to 256 bytes are taken, longer ones and keys on a
// recurring message refused before anything is written.
func TestOrderingKeyBounds(t *testing.T) {
	f := setup(t)
	long := string(make([]byte, contract.MaxOrderingKey))
	f.park(t, keyed("x", long), keyed("y", long))
	if got := claimedIDs(f.claimShard(t, f.s.ShardOfKey(long))); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("claimed %v, want [x]", got)
	}
	if _, err := f.s.Park(t.Context(), []ParkRequest{keyed("z", long+"!")}); err == nil {
		t.Fatal("a key of 257 bytes was parked")
	}
	r := keyed("w", "k")
	r.Envelope.Every = "1m"
	if _, err := f.s.Park(t.Context(), []ParkRequest{r}); err == nil {
		t.Fatal("a recurring message with an ordering key was parked")
	}
}

// TestOrderingKeyProperty runs random interleavings of parks (new messages and
// replaces, with or without a key, some due later), cancels, claims with acks, failed
// publishes put back, and lost acks (the lease runs out: a claim of a replica that died),
// against a model of each key's chain. Invariant: a keyed message is claimed only when
// it is the first live message of its key in parking order, never early; after draining,
// every message that was not cancelled was acked, none twice after its ack.
func TestOrderingKeyProperty(t *testing.T) {
	f := setup(t, func(c *Config) { c.Lease = 300 * time.Millisecond })
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { propertyRun(t, f, seed) })
	}
}

// chainModel is the expected order: per key the live messages (shard and id) in parking
// order; keyOf the key of each live message ("" none). A message is its id in its shard:
// the same id with another key is another message unless both keys (or none) select the
// same shard, where a park re-keys it.
type chainModel struct {
	chains map[string][]slot
	keyOf  map[slot]string
}

type slot struct {
	sh int
	id string
}

func (m *chainModel) park(at slot, key string) {
	if old, ok := m.keyOf[at]; ok && old == key {
		return // a replace keeps its place
	}
	m.remove(at)
	m.keyOf[at] = key
	if key != "" {
		m.chains[key] = append(m.chains[key], at)
	}
}

func (m *chainModel) remove(at slot) {
	key, ok := m.keyOf[at]
	if !ok {
		return
	}
	delete(m.keyOf, at)
	if key != "" {
		m.chains[key] = slices.DeleteFunc(m.chains[key], func(x slot) bool { return x == at })
	}
}

func propertyRun(t *testing.T, f *fixture, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	model := &chainModel{chains: map[string][]slot{}, keyOf: map[slot]string{}}
	keys := []string{"", fmt.Sprintf("k%d-1", seed), fmt.Sprintf("k%d-2", seed), fmt.Sprintf("k%d-3", seed)}
	var ids []string
	held := map[slot]Claimed{} // claimed and not settled
	check := func(ms []Claimed) {
		for _, m := range ms {
			at := slot{m.Shard, m.ID}
			key, live := model.keyOf[at]
			if !live || key != m.Envelope.OrderingKey {
				t.Fatalf("claimed %v with key %q, the model has %q (live %v)", at, m.Envelope.OrderingKey, key, live)
			}
			if key != "" && model.chains[key][0] != at {
				t.Fatalf("claimed %v of key %s out of order: chain %v", at, key, model.chains[key])
			}
			held[at] = m
		}
	}
	claimAll := func() {
		for sh := range f.s.Shards() {
			check(f.claimShard(t, sh))
		}
	}
	settle := func(at slot, m Claimed) {
		if rng.IntN(2) == 0 { // an ack alone
			a, err := f.s.Ack(t.Context(), []Receipt{m.Receipt})
			if err != nil {
				t.Fatal(err)
			}
			if a.N == 1 {
				model.remove(at)
			}
			delete(held, at)
			return
		}
		x := f.s.Exchange(t.Context(), []Receipt{m.Receipt}, nil, nil) // egress's: leases what it releases
		if x.AckErr != nil {
			t.Fatal(x.AckErr)
		}
		if x.Acked.N == 1 {
			model.remove(at)
		}
		delete(held, at)
		for _, c := range x.Released {
			check(c.Messages)
		}
	}
	for step := 0; step < 300; step++ {
		switch op := rng.IntN(10); {
		case op < 4: // park a new message or replace one
			id := fmt.Sprintf("p%d-%d", seed, len(ids))
			if len(ids) > 0 && rng.IntN(3) == 0 {
				id = ids[rng.IntN(len(ids))]
			} else {
				ids = append(ids, id)
			}
			key := keys[rng.IntN(len(keys))]
			r := keyed(id, key)
			if rng.IntN(4) == 0 {
				r.Delay = time.Duration(rng.IntN(30)) * time.Millisecond
			}
			at := slot{f.s.ShardOfMessage(id, key), id}
			f.park(t, r)
			if c, ok := held[at]; ok && c.Envelope.OrderingKey != key {
				delete(held, at) // re-keyed while in delivery: its claim is fenced out
			}
			model.park(at, key)
		case op < 5 && len(ids) > 0: // cancel
			id, key := ids[rng.IntN(len(ids))], keys[rng.IntN(len(keys))]
			at := slot{f.s.ShardOfMessage(id, key), id}
			_, live := model.keyOf[at]
			ok, err := f.s.CancelKeyAt(t.Context(), id, key, 0)
			var inDelivery *InDeliveryError
			switch {
			case errors.As(err, &inDelivery):
			case err != nil:
				t.Fatal(err)
			case ok && !live:
				t.Fatalf("cancel of %v found it, the model has it gone", at)
			case ok:
				model.remove(at)
			}
		case op < 8: // claim, then ack most, put some back, lose some acks
			claimAll()
			for at, m := range held {
				switch r := rng.IntN(10); {
				case r < 7:
					settle(at, m)
				case r < 8:
					x := f.s.Exchange(t.Context(), nil, []RetryRequest{{Receipt: m.Receipt, PutBack: true, Backoff: time.Millisecond}}, nil)
					if x.RetryErr != nil {
						t.Fatal(x.RetryErr)
					}
					delete(held, at)
				case r < 9:
					delete(held, at) // the replica died: its lease runs out
				}
			}
		default:
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); len(model.keyOf) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %d left, chains %v", len(model.keyOf), model.chains)
		}
		claimAll()
		for len(held) > 0 { // settling may lease more
			for at, m := range held {
				settle(at, m)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOrderingKeyBulk: a bulk move of a held message changes its due time and keeps it
// held in its place (c moved into the past is not claimed before a and b); a bulk cancel
// of the head releases the next.
func TestOrderingKeyBulk(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	a := keyed("a", "k")
	a.Delay = time.Hour
	f.park(t, a, keyed("b", "k"), keyed("c", "k"))
	change := func(id string, op BulkOp) {
		t.Helper()
		for _, l := range scanAll(t, f.s) {
			if l.ID != id {
				continue
			}
			c, err := f.s.Change(t.Context(), sh, op, []Pick{l.Pick()}, nil)
			if err != nil || c.N != 1 {
				t.Fatalf("%s %s: %+v %v", op.Kind, id, c, err)
			}
			return
		}
		t.Fatalf("%s not listed", id)
	}
	change("c", BulkOp{Kind: BulkShift, Shift: -time.Minute, MaxDelay: time.Hour})
	change("b", BulkOp{Kind: BulkShift, Shift: time.Hour, MaxDelay: 2 * time.Hour})
	if got := claimedIDs(f.claimShard(t, sh)); len(got) != 0 {
		t.Fatalf("claimed %v while a, the head, is due in an hour", got)
	}
	change("a", BulkOp{Kind: BulkCancel})
	if got := claimedIDs(f.claimShard(t, sh)); len(got) != 0 {
		t.Fatalf("claimed %v: b, released, is due in an hour and c must wait for it", got)
	}
	change("b", BulkOp{Kind: BulkDeliverNow})
	if got := claimedIDs(f.claimShard(t, sh)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("claimed %v after b was moved to now, want [b]", got)
	}
}

// TestOrderingKeyReplacedThenFailed: the replaced version of a keyed head in delivery
// fails to publish: its retry, fenced out, makes the new version eligible at once (not
// after the lease), still before the next of the key.
func TestOrderingKeyReplacedThenFailed(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	f.park(t, keyed("a", "k"), keyed("b", "k"))
	c := f.claimShard(t, sh)
	if got := claimedIDs(c); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("claimed %v, want [a]", got)
	}
	f.park(t, keyed("a", "k"))
	x := f.s.Exchange(t.Context(), nil, []RetryRequest{{Receipt: c[0].Receipt, Backoff: time.Hour}}, nil)
	if x.RetryErr != nil {
		t.Fatal(x.RetryErr)
	}
	got := f.claimShard(t, sh)
	if !slices.Equal(claimedIDs(got), []string{"a"}) || got[0].Version == c[0].Version {
		t.Fatalf("claimed %v after the replaced version failed, want the new a", claimedIDs(got))
	}
}

// TestOrderingKeyGet: a keyed message is read with its key, and with what holds it;
// without it (another shard) it is not found.
func TestOrderingKeyGet(t *testing.T) {
	f := setup(t)
	f.park(t, keyed("g", "order-7"), keyed("h", "order-7"))
	m, err := f.s.GetKey(t.Context(), "g", "order-7")
	if err != nil || m.Envelope.OrderingKey != "order-7" || m.Shard != f.s.ShardOfKey("order-7") || m.HeldBy != "" {
		t.Fatalf("get with key: %+v %v", m, err)
	}
	if m, err := f.s.GetKey(t.Context(), "h", "order-7"); err != nil || m.HeldBy != "g" {
		t.Fatalf("get of the held one: held by %q, %v; want g", m.HeldBy, err)
	}
	if f.s.ShardOf("g") != f.s.ShardOfKey("order-7") {
		if _, err := f.s.Get(t.Context(), "g"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get without key: %v, want not found", err)
		}
	}
}

// TestOrderingKeyReleased: a claim returns when a keyed message held past its due time
// was released (its predecessor's ack), so that its lateness counts from then; a message
// released before its due time, and one without key claimed beside a released one,
// return 0.
func TestOrderingKeyReleased(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	plain := idsOnShard(f.s, sh, 1, "plain")[0]
	p := f.park(t, keyed("a", "k"), keyed("b", "k"))
	a := f.claimShard(t, sh)
	f.waitRedisAfter(t, p[1].Due) // b is due and held
	f.park(t, ParkRequest{ID: plain, Envelope: sampleEnvelope(1)})
	f.ack(t, a...)
	c, err := f.s.Claim(t.Context(), sh, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := claimedIDs(c.Messages); !slices.Equal(got, []string{"b", plain}) {
		t.Fatalf("claimed %v, want [b %s]", got, plain)
	}
	b, pl := c.Messages[0], c.Messages[1]
	if b.Released <= b.Due || b.Released > c.Now {
		t.Errorf("b released %d; want after its due %d, at or before the claim %d", b.Released, b.Due, c.Now)
	}
	if pl.Released != 0 {
		t.Errorf("unkeyed %s released %d, want 0", plain, pl.Released)
	}

	f.park(t, ParkRequest{ID: "c", Replace: true, Delay: time.Minute, Envelope: keyed("c", "k").Envelope})
	f.ack(t, c.Messages...) // releases c a minute before its due time
	x := f.s.Exchange(t.Context(), nil, nil, []ClaimRequest{{Shard: sh, Max: 10, Ahead: 2 * time.Minute}})
	if err := x.Err(); err != nil {
		t.Fatal(err)
	}
	if got := x.Claims[0].Messages; len(got) != 1 || got[0].ID != "c" || got[0].Released != 0 || got[0].Eligible != got[0].Due {
		t.Fatalf("claimed ahead %+v; want c, eligible at its due, released 0", got)
	}
}

// TestOrderingKeyAckLeasesNext: egress's ack (Exchange) that releases the next message of
// a key leases it at once when it is due, so no claim is needed: it comes back in
// Released with a token that fences its own ack, and a claim does not see it. Released
// after its due time, it says so. A caller whose table of the shard's names is not
// current gets no lease: the next message is claimed as any other. A plain Ack leases
// nothing.
func TestOrderingKeyAckLeasesNext(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	p := f.park(t, keyed("a", "k"), keyed("b", "k"), keyed("c", "k"), keyed("d", "k"))
	a := f.claimShard(t, sh)
	f.waitRedisAfter(t, p[1].Due)
	x := f.s.Exchange(t.Context(), []Receipt{a[0].Receipt}, nil, nil)
	if err := x.Err(); err != nil {
		t.Fatal(err)
	}
	if len(x.Released) != 1 || len(x.Released[0].Messages) != 1 {
		t.Fatalf("released %+v, want b leased", x.Released)
	}
	b := x.Released[0].Messages[0]
	if b.ID != "b" || b.Token%2 != 0 || b.Token <= x.Released[0].Now || b.Eligible != x.Released[0].Now ||
		b.Released <= b.Due || b.Envelope.OrderingKey != "k" {
		t.Fatalf("leased %+v (now %d); want b, an even token after now, eligible now, released after its due", b, x.Released[0].Now)
	}
	if got := f.claimShard(t, sh); len(got) != 0 {
		t.Fatalf("claimed %v while b is leased", claimedIDs(got))
	}
	stale := b.Receipt
	stale.Token += 2
	if x := f.s.Exchange(t.Context(), []Receipt{stale}, nil, nil); x.Acked.N != 0 || len(x.Released) != 0 {
		t.Fatalf("an ack with another token acked %d, released %+v", x.Acked.N, x.Released)
	}

	f.s.names.adopt(sh, emptyTable()) // a table of unknown generation
	x = f.s.Exchange(t.Context(), []Receipt{b.Receipt}, nil, nil)
	if x.Acked.N != 1 || len(x.Released) != 0 {
		t.Fatalf("with stale names: acked %d, released %+v; want 1 acked, nothing leased", x.Acked.N, x.Released)
	}
	c := f.claimShard(t, sh)
	if got := claimedIDs(c); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("claimed %v, want [c]", got)
	}
	f.ack(t, c...) // Ack alone leases nothing
	if got := claimedIDs(f.claimShard(t, sh)); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("claimed %v after Ack, want [d]", got)
	}
}

// waitRedisAfter polls Redis' clock until it is past ms.
func (f *fixture) waitRedisAfter(t *testing.T, ms int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		now, err := f.rdb.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.UnixMilli() > ms {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis time %d not past %d", now.UnixMilli(), ms)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestObserveHeld: Observe counts the entries held by their key's predecessor.
func TestObserveHeld(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	f.park(t, keyed("a", "k"), keyed("b", "k"), keyed("c", "k"))
	held := func() int64 {
		t.Helper()
		obs, err := f.s.Observe(t.Context(), []int{sh}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return obs.Shards[0].Held
	}
	if n := held(); n != 2 {
		t.Fatalf("held %d, want 2 (b and c)", n)
	}
	f.ack(t, f.claimShard(t, sh)...)
	if n := held(); n != 1 {
		t.Fatalf("held %d after a's ack, want 1 (c)", n)
	}
}

// TestOrderingKeyCancelOtherKey: a cancel of the id with another key, or none, that falls
// in the same shard does not reach a keyed message: (key, id) names it.
func TestOrderingKeyCancelOtherKey(t *testing.T) {
	f := setup(t)
	sh := f.s.ShardOfKey("k")
	id := idsOnShard(f.s, sh, 1, "same")[0] // its own shard is k's
	f.park(t, keyed(id, "k"))
	if ok, err := f.s.Cancel(t.Context(), id); err != nil || ok {
		t.Fatalf("cancel without the key: %v %v, want not found", ok, err)
	}
	if _, err := f.s.GetKey(t.Context(), id, "k"); err != nil {
		t.Fatalf("the keyed message is gone after a cancel without its key: %v", err)
	}
	if ok, err := f.s.CancelKeyAt(t.Context(), id, "k", 0); err != nil || !ok {
		t.Fatalf("cancel with the key: %v %v", ok, err)
	}
}

// TestOrderingKeyMiniredis: the chain scripts run on the dev bridge's store (miniredis,
// without Redis' struct library): a key's second message waits for the first's ack.
func TestOrderingKeyMiniredis(t *testing.T) {
	s := miniredisStore(t, miniredis.RunT(t), Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	if _, err := s.Park(t.Context(), []ParkRequest{keyed("a", "k"), keyed("b", "k")}); err != nil {
		t.Fatal(err)
	}
	sh := s.ShardOfKey("k")
	claim := func() []string {
		t.Helper()
		c, err := s.Claim(t.Context(), sh, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Messages) == 1 {
			if _, err := s.Ack(t.Context(), []Receipt{c.Messages[0].Receipt}); err != nil {
				t.Fatal(err)
			}
		}
		return claimedIDs(c.Messages)
	}
	if got := claim(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("claimed %v, want [a]", got)
	}
	if got := claim(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("claimed %v after a's ack, want [b]", got)
	}
}
