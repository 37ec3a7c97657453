package delaystore

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/testredis"
)

// internSample interns sampleEnvelope's target and source in every shard, so that a
// test's parks that follow cost no intern call.
func (f *fixture) internSample(t *testing.T) {
	t.Helper()
	e := sampleEnvelope(0)
	want := map[int][]string{}
	for sh := range f.s.Shards() {
		want[sh] = []string{e.Target, e.Source}
	}
	if errs := f.s.intern(t.Context(), want); errs != nil {
		t.Fatal(errs)
	}
}

// raw returns the stored value of id.
func (f *fixture) raw(t *testing.T, s *Store, id string) string {
	t.Helper()
	v, err := f.rdb.HGet(t.Context(), s.keys[s.ShardOf(id)].m, id).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A new store holds targets and sources as codes (docs/design.md "Interned names"): the
// names are not in the stored values, and every reader gets them back: Get, another
// replica's Claim (which loads the codes it lacks), the counts per target, and listing
// with a Redis-side literal filter.
func TestInternedNamesStoredAsCodes(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	var reqs []ParkRequest
	for i := range 8 {
		e := sampleEnvelope(i)
		reqs = append(reqs, ParkRequest{ID: fmt.Sprintf("n-%d", i), Delay: time.Millisecond, Envelope: e})
	}
	reqs[7].Envelope.Target = "nats:billing.retry"
	f.park(t, reqs...)
	for _, r := range reqs {
		v := f.raw(t, f.s, r.ID)
		if strings.Contains(v, "orders.timeout") || strings.Contains(v, "billing") || strings.Contains(v, "delay.in") {
			t.Fatalf("%s stored with its names: %q", r.ID, v)
		}
		m, err := f.s.Get(ctx, r.ID)
		if err != nil || m.Envelope.Target != r.Envelope.Target || m.Envelope.Source != r.Envelope.Source {
			t.Fatalf("get %s: %+v, %v", r.ID, m.Envelope, err)
		}
	}

	ts, err := f.replica(t, time.Minute).Targets(ctx, false, 1000) // each reader a replica that knows no code yet
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, tc := range ts {
		counts[tc.Target] = tc.Parked
	}
	if counts["nats:orders.timeout"] != 7 || counts["nats:billing.retry"] != 1 || len(counts) != 2 {
		t.Fatalf("counts per target %v, want 7 orders.timeout and 1 billing.retry", counts)
	}
	l, _, err := f.replica(t, time.Minute).List(ctx, ListQuery{Match: targetIs("nats:billing"), Literals: []string{"billing"}, Limit: 100}, time.Minute)
	if err != nil || len(l) != 1 || l[0].ID != "n-7" || l[0].Source != "nats:delay.in" {
		t.Fatalf("list billing: %+v, %v", l, err)
	}
	other := f.replica(t, time.Minute)
	time.Sleep(20 * time.Millisecond) // every message due
	got := map[string]string{}
	for sh := range other.Shards() {
		c, err := other.Claim(ctx, sh, 100)
		if err != nil || len(c.Corrupt) > 0 {
			t.Fatalf("claim shard %d by another replica: %v, %d corrupt", sh, err, len(c.Corrupt))
		}
		for _, m := range c.Messages {
			got[m.ID] = m.Envelope.Target + " " + m.Envelope.Source
		}
	}
	for _, r := range reqs {
		if want := r.Envelope.Target + " " + r.Envelope.Source; got[r.ID] != want {
			t.Fatalf("claimed %s as %q, want %q (all: %v)", r.ID, got[r.ID], want, got)
		}
	}

}

// A shard that lost a code this replica still uses (a failover lost its intern and
// everything parked after it) does not get bodies with that code: park.lua refuses the
// group, Park interns again and parks them, and each message keeps its own target
// although the code went to another name in the meantime.
func TestParkAfterLostNames(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	ids := idsOnShard(f.s, 1, 3, "lost")
	park := func(s *Store, id, target string) {
		t.Helper()
		e := sampleEnvelope(0)
		e.Target = target
		p, err := s.Park(ctx, []ParkRequest{{ID: id, Delay: time.Hour, Envelope: e}})
		if err != nil || p[0].ID != id {
			t.Fatalf("park %s: %+v, %v", id, p, err)
		}
	}
	park(f.s, ids[0], "nats:a.first") // the book now holds shard 1's first code for it
	// The failover: the shard's names and its entry are gone.
	if err := f.rdb.Del(ctx, f.s.keys[1].nm, f.s.keys[1].m, f.s.keys[1].z).Err(); err != nil {
		t.Fatal(err)
	}
	other := f.replica(t, time.Minute)
	park(other, ids[1], "nats:b.second") // takes the shard's first code
	park(f.s, ids[2], "nats:a.first")    // with the code it knew: refused, interned again
	for _, s := range []*Store{f.s, other} {
		for id, want := range map[string]string{ids[1]: "nats:b.second", ids[2]: "nats:a.first"} {
			if m, err := s.Get(ctx, id); err != nil || m.Envelope.Target != want {
				t.Fatalf("%s: %+v, %v; want target %s", id, m.Envelope, err, want)
			}
		}
	}
}

// A shard whose names key was deleted while it held entries gives no code until it is
// empty: the entries whose codes went with the key read as corrupt (egress dead-letters
// them), never as another target's, and new messages are stored with their names.
func TestNamesDeletedWithEntries(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	ids := idsOnShard(f.s, 1, 2, "deleted")
	e := sampleEnvelope(0)
	f.park(t, ParkRequest{ID: ids[0], Delay: time.Hour, Envelope: e})
	if err := f.rdb.Del(ctx, f.s.keys[1].nm).Err(); err != nil {
		t.Fatal(err)
	}
	other := f.replica(t, time.Minute)
	e2 := sampleEnvelope(1)
	e2.Target = "nats:b.second"
	if p, err := other.Park(ctx, []ParkRequest{{ID: ids[1], Delay: time.Hour, Envelope: e2}}); err != nil || p[0].ID != ids[1] {
		t.Fatalf("park after the deletion: %+v, %v", p, err)
	}
	if v := f.raw(t, other, ids[1]); !strings.Contains(v, "nats:b.second") {
		t.Fatalf("a shard without its names gave a code: %q", v)
	}
	if m, err := other.Get(ctx, ids[1]); err != nil || m.Envelope.Target != "nats:b.second" {
		t.Fatalf("get %s: %+v, %v", ids[1], m.Envelope, err)
	}
	if m, err := other.Get(ctx, ids[0]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("entry whose code was deleted: %+v, %v; want ErrCorrupt", m.Envelope, err)
	}
}

// A shard gives at most maxNames codes; names beyond are stored whole, and read back.
func TestNamesBound(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	id := idsOnShard(f.s, 2, 1, "bound")[0]
	if err := f.rdb.HSet(ctx, f.s.keys[2].nm, "#", maxNames).Err(); err != nil {
		t.Fatal(err)
	}
	e := sampleEnvelope(0)
	e.Target = "nats:reply.abc123"
	f.park(t, ParkRequest{ID: id, Delay: time.Hour, Envelope: e})
	if v := f.raw(t, f.s, id); !strings.Contains(v, "nats:reply.abc123") {
		t.Fatalf("name of a full shard table not stored whole: %q", v)
	}
	if n, _ := f.rdb.HLen(ctx, f.s.keys[2].nm).Result(); n != 1 {
		t.Fatalf("a full table grew to %d fields", n)
	}
	if m, err := f.s.Get(ctx, id); err != nil || m.Envelope.Target != e.Target {
		t.Fatalf("get: %+v, %v", m.Envelope, err)
	}
}

// A store of the previous version (compact, ",c1") keeps its format: names whole, no
// names keys.
func TestCompactStoreKeepsNames(t *testing.T) {
	f := newMarkedFixture(t, testredis.URL(t), "4,p4096,c1")
	f.park(t, ParkRequest{ID: "c1-msg", Delay: time.Hour, Envelope: sampleEnvelope(0)})
	if v := f.raw(t, f.s, "c1-msg"); !strings.Contains(v, "nats:orders.timeout") || !strings.Contains(v, "delay.in") {
		t.Fatalf("compact store value without its names: %q", v)
	}
	for sh := range f.s.Shards() {
		if n := f.rdb.Exists(t.Context(), f.s.keys[sh].nm).Val(); n != 0 {
			t.Fatalf("compact store got a names key in shard %d", sh)
		}
	}
}

// A body with codes decodes with the book that holds them (and to the same envelope as
// the body with the names), reads as corrupt without a book, and rejects codes written
// in a form the encoder never writes.
func TestCodedBodyRoundTrip(t *testing.T) {
	b := newNameBook(4)
	b.learn(1, "nats:orders.timeout", 5)
	b.learn(1, "nats:delay.in", 9)
	env := sampleEnvelope(3)
	env.SourceID = testID
	withCodes := encodeBodySent(env, testID, 0, true, coded{target: codeField(5), source: 9})
	whole := encodeBody(env, testID)
	if len(withCodes) != len(whole)-len("nats:orders.timeout")-len("delay.in")+2 {
		t.Fatalf("coded body %d bytes, whole %d", len(withCodes), len(whole))
	}
	got, err := decodeBodyIn(withCodes, testID, b)
	want, err2 := decodeBody(whole, testID)
	if err != nil || err2 != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("coded body decodes to %+v, %v; want %+v, %v", got, err, want, err2)
	}
	if _, err := decodeBody(withCodes, testID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("coded body without a book: %v, want ErrCorrupt", err)
	}
	if _, err := decodeBodyIn(withCodes, testID, newNameBook(4)); !errors.Is(err, errUnknownName) {
		t.Fatalf("coded body with a book that lacks the codes: %v, want errUnknownName", err)
	}
	// The flags byte follows the format byte: a source code with a broker prefix flag, and
	// with the http flag, are not written by the encoder.
	for _, extra := range []byte{flagNATS << 2, flagSourceHTTP} {
		bad := slices.Clone(withCodes)
		bad[1] |= extra
		if _, err := decodeBodyIn(bad, testID, b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flags %#x: %v, want ErrCorrupt", bad[1], err)
		}
	}
	zero := encodeBodySent(env, testID, 0, true, coded{target: codeField(0)})
	if _, err := decodeBodyIn(zero, testID, b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("target code 0: %v, want ErrCorrupt", err)
	}
}
