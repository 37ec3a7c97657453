package delaystore

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
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

// scanAll reads every shard of s with Scan, from the start to the end in chunks of 100,
// keeping the entries whose target holds literals.
func scanAll(t *testing.T, s *Store, literals ...string) []Scanned {
	t.Helper()
	var out []Scanned
	for sh := range s.Shards() {
		req := ScanRequest{Shard: sh, To: math.MaxInt64, Count: 100, Literals: literals}
		for {
			p := s.Scan(t.Context(), []ScanRequest{req})[0]
			if p.Err != nil {
				t.Fatalf("scan shard %d: %v", sh, p.Err)
			}
			out = append(out, p.Entries...)
			if p.Through {
				break
			}
			req.After = p.Next
		}
	}
	return out
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
// replica's Claim (which loads the codes it lacks), the counts per target, and a scan
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

	perShard, err := f.replica(t).ParkedByTarget(ctx, false) // each reader a replica that knows no code yet
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, shard := range perShard {
		for target, n := range shard {
			counts[target] += n
		}
	}
	if counts["nats:orders.timeout"] != 7 || counts["nats:billing.retry"] != 1 || len(counts) != 2 {
		t.Fatalf("counts per target %v, want 7 orders.timeout and 1 billing.retry", counts)
	}
	l := scanAll(t, f.replica(t), "billing")
	if len(l) != 1 || l[0].ID != "n-7" || l[0].Target != "nats:billing.retry" || l[0].Source != "nats:delay.in" || l[0].Err != nil {
		t.Fatalf("scan billing: %+v", l)
	}
	other := f.replica(t)
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
	other := f.replica(t)
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
	other := f.replica(t)
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

// A body with codes decodes with the table that holds them (and to the same envelope as
// the body with the names), reads as corrupt without a table or with one that lacks them,
// and rejects codes written in a form the encoder never writes.
func TestCodedBodyRoundTrip(t *testing.T) {
	b := emptyTable().with("g1", []string{"nats:orders.timeout", "nats:delay.in"}, []int64{5, 9})
	env := sampleEnvelope(3)
	env.SourceID = testID
	withCodes := encodeBodySent(env, testID, 0, coded{target: codeField(5), source: 9})
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
		t.Fatalf("coded body without a table: %v, want ErrCorrupt", err)
	}
	if _, err := decodeBodyIn(withCodes, testID, emptyTable()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("coded body with a table that lacks the codes: %v, want ErrCorrupt", err)
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
	zero := encodeBodySent(env, testID, 0, coded{target: codeField(0)})
	if _, err := decodeBodyIn(zero, testID, b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("target code 0: %v, want ErrCorrupt", err)
	}
}

// wrongTargets parks, through s, one message per target of targets (ids on shard sh, due
// at once) and returns what reader makes of them: the claimed messages whose target is not
// the one parked, those read as corrupt, and the Get and Scan answers that name another
// target. Only its own target or corrupt is right (docs/contract.md section 3).
func wrongTargets(t *testing.T, s, reader *Store, sh int, tag string, targets []string) (wrong, corrupt int) {
	t.Helper()
	ctx := t.Context()
	ids := idsOnShard(s, sh, len(targets), tag)
	want := map[string]string{}
	var reqs []ParkRequest
	for i, id := range ids {
		e := sampleEnvelope(i)
		e.Target = targets[i]
		want[id] = targets[i]
		reqs = append(reqs, ParkRequest{ID: id, Envelope: e})
	}
	if p, err := s.Park(ctx, reqs); err != nil || p[len(p)-1].ID == "" {
		t.Fatalf("park: %+v, %v", p, err)
	}
	for _, id := range ids {
		if m, err := reader.Get(ctx, id); err == nil && m.Envelope.Target != want[id] {
			wrong++
		}
	}
	for _, l := range scanAll(t, reader) {
		if w, ok := want[l.ID]; ok && l.Err == nil && l.Target != w {
			wrong++
		}
	}
	c, err := reader.Claim(ctx, sh, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Messages {
		if w, ok := want[m.ID]; ok && m.Envelope.Target != w {
			wrong++
		}
	}
	return wrong, len(c.Corrupt)
}

// namesOf returns n target names with tag.
func namesOf(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("nats:%s.t%d", tag, i)
	}
	return out
}

// TestNoWrongTargetAfterReset (issue 37 item 1): replica A learns shard 1's codes, Redis
// loses its data (restart without AOF: FLUSHALL on the test's own server), replica B parks
// to the same names in another order and gets the codes A knew for other names. A's
// Claim, Get and Scan must give each message its own target: A never decodes a code with
// a table of another generation than the one the read saw.
func TestNoWrongTargetAfterReset(t *testing.T) {
	f, _ := ownServer(t)
	a, b := f.s, f.replica(t)
	names := namesOf("out", 50)
	if wrong, corrupt := wrongTargets(t, a, a, 1, "before", names); wrong+corrupt != 0 {
		t.Fatalf("before the reset: %d wrong, %d corrupt", wrong, corrupt)
	}
	if err := f.rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Init(t.Context()); err != nil { // the replica that comes back first
		t.Fatal(err)
	}
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	if wrong, corrupt := wrongTargets(t, b, a, 1, "after", reversed); wrong+corrupt != 0 {
		t.Fatalf("after the reset: %d read with another target, %d corrupt (of %d)", wrong, corrupt, len(names))
	}
}

// TestNoWrongTargetAfterFailover (issue 37 item 1): a failover to a replica that missed
// the last writes: B read shard 1's names, A interned 30 new names (and parked), the
// promoted replica has the names hash as it was before A's intern (DUMP / RESTORE here)
// and none of A's entries; B parks to 30 other new names and gets A's codes. A must read
// B's messages with their own targets.
func TestNoWrongTargetAfterFailover(t *testing.T) {
	f, _ := ownServer(t)
	ctx := t.Context()
	a, b := f.s, f.replica(t)
	if wrong, corrupt := wrongTargets(t, b, b, 1, "first", namesOf("first", 5)); wrong+corrupt != 0 {
		t.Fatalf("first: %d wrong, %d corrupt", wrong, corrupt)
	}
	k := f.s.keys[1]
	before, err := f.rdb.Dump(ctx, k.nm).Result()
	if err != nil {
		t.Fatal(err)
	}
	if wrong, corrupt := wrongTargets(t, a, a, 1, "lost", namesOf("lost", 30)); wrong+corrupt != 0 {
		t.Fatalf("before the failover: %d wrong, %d corrupt", wrong, corrupt)
	}
	// The promoted replica: the names as before A's writes, none of A's entries.
	if err := f.rdb.Del(ctx, k.nm, k.z, k.m).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.Restore(ctx, k.nm, 0, before).Err(); err != nil {
		t.Fatal(err)
	}
	if wrong, corrupt := wrongTargets(t, b, a, 1, "after", namesOf("other", 30)); wrong+corrupt != 0 {
		t.Fatalf("after the failover: %d read with another target, %d corrupt (of 30)", wrong, corrupt)
	}
}

// TestNamesKeyDeletedNeverGuessed (issue 37 item 1): shard 1's names hash deleted by hand
// under parked messages: the replica that parked them (whose table had the codes) reads
// them as corrupt, never with a name it remembers from a table Redis no longer has.
func TestNamesKeyDeletedNeverGuessed(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	names := namesOf("gone", 10)
	ids := idsOnShard(f.s, 1, len(names), "gone")
	var reqs []ParkRequest
	for i, id := range ids {
		e := sampleEnvelope(i)
		e.Target = names[i]
		reqs = append(reqs, ParkRequest{ID: id, Envelope: e})
	}
	f.park(t, reqs...)
	if err := f.rdb.Del(ctx, f.s.keys[1].nm).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := f.s.Claim(ctx, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Messages) != 0 || len(c.Corrupt) != len(ids) {
		t.Fatalf("claimed %d messages (%d corrupt) whose names were deleted; want all %d corrupt", len(c.Messages), len(c.Corrupt), len(ids))
	}
}
