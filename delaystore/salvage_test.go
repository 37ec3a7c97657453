package delaystore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// TestCorruptSalvagesWhatSurvives (docs/contract.md section 3, "Only its own target"):
// shard 1's names hash deleted by hand under parked messages: Claim reports them as
// corrupt with everything but the names that were codes (source id, headers with the hops
// count, key, payload, expiry, a source held whole), and their receipts ack them away.
func TestCorruptSalvagesWhatSurvives(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	ids := idsOnShard(f.s, 1, 2, "lost")
	orig := sampleEnvelope(0)
	orig.SourceID = "js:IN:7"
	orig.Headers = append(orig.Headers, headers.Header{Key: "x-delay-hops", Value: "2"})
	orig.Expires = time.Minute
	api := sampleEnvelope(1)
	api.Source, api.Key, api.Target = "http", []byte("k"), "nats:other.target"
	f.park(t, ParkRequest{ID: ids[0], Envelope: orig}, ParkRequest{ID: ids[1], Envelope: api})
	if raw := f.raw(t, f.s, ids[0]); len(raw) == 0 {
		t.Fatal("nothing parked")
	}
	if err := f.rdb.Del(ctx, f.s.keys[1].nm).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := f.s.Claim(ctx, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Messages) != 0 || len(c.Corrupt) != 2 {
		t.Fatalf("claimed %d messages, %d corrupt; want 2 corrupt", len(c.Messages), len(c.Corrupt))
	}
	want := map[string]Envelope{
		ids[0]: withNames(orig, "", ""),    // target and source were codes
		ids[1]: withNames(api, "", "http"), // "http" is no code
	}
	var receipts []Receipt
	for _, k := range c.Corrupt {
		if !errors.Is(k.Err, ErrCorrupt) || k.Version == 0 || k.Eligible == 0 {
			t.Errorf("%s: err %v, version %d, eligible %d; want ErrCorrupt, the stored version and a time", k.ID, k.Err, k.Version, k.Eligible)
		}
		if got := withPayload(k.Envelope); !reflect.DeepEqual(got, withPayload(want[k.ID])) {
			t.Errorf("%s salvaged\n %#v\nwant\n %#v", k.ID, got, want[k.ID])
		}
		receipts = append(receipts, k.Receipt)
	}
	if a, err := f.s.Ack(ctx, receipts); err != nil || a.N != 2 {
		t.Fatalf("ack of the corrupt receipts: %+v, %v; want 2 acked", a, err)
	}
	if z, m := f.counts(t); z+m != 0 {
		t.Fatalf("store holds %d scored, %d stored after the ack", z, m)
	}
}

func withNames(e Envelope, target, source string) Envelope {
	e.Target, e.Source = target, source
	return e
}

// TestClaimCorruptGarbage: an entry whose body does not decode keeps its body's bytes as
// the payload, one whose stored header is unreadable its whole value (version 0); both
// are acked away by their receipts (the lease token fences the one without a version).
func TestClaimCorruptGarbage(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	ids := idsOnShard(f.s, 2, 2, "junk")
	tag := f.s.keys[2]
	body := string(binaryHeader(5, 0, 1000)) + "\x09garbage"
	f.rdb.HSet(ctx, tag.m, ids[0], body, ids[1], "not a header")
	f.rdb.ZAdd(ctx, tag.z, redis.Z{Score: 1000, Member: ids[0]}, redis.Z{Score: 1000, Member: ids[1]})
	c, err := f.s.Claim(ctx, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Corrupt) != 2 {
		t.Fatalf("corrupt = %+v", c.Corrupt)
	}
	want := map[string]struct {
		version int64
		payload string
	}{ids[0]: {5, "\x09garbage"}, ids[1]: {0, "not a header"}}
	for _, k := range c.Corrupt {
		w := want[k.ID]
		e := k.Envelope
		if k.Version != w.version || string(e.Payload) != w.payload || e.Target != "" || e.Source != "" || e.Headers != nil ||
			!errors.Is(k.Err, ErrCorrupt) {
			t.Errorf("%s: version %d, envelope %#v, err %v; want version %d, payload %q only", k.ID, k.Version, e, k.Err, w.version, w.payload)
		}
	}
	if a, err := f.s.Ack(ctx, []Receipt{c.Corrupt[0].Receipt, c.Corrupt[1].Receipt}); err != nil || a.N != 2 {
		t.Fatalf("ack of the corrupt receipts: %+v, %v; want 2 acked", a, err)
	}
}

// TestSalvageStored: what survives of a body by its fault; a body that decodes salvages
// as it decodes.
func TestSalvageStored(t *testing.T) {
	table := emptyTable().with("g", []string{"nats:kept", "nats:delay.in"}, []int64{17, 33})
	env := Envelope{Target: "nats:kept", Source: "nats:delay.in", SourceID: "js:IN:1", Key: []byte("k"),
		Headers: headers.List{{Key: "a", Value: "1"}}, Payload: []byte("p")}
	stored := func(c coded) string {
		return string(binaryHeader(3, 1, 1000)) + string(encodeBodySent(env, testID, 0, c))
	}
	for _, tc := range []struct {
		name   string
		raw    string
		want   Envelope
		strict bool // decodeStored reads it
	}{
		{"decodes", stored(coded{target: codeField(17), source: 33}), env, true},
		{"target code lost", stored(coded{target: codeField(1), source: 33}), withNames(env, "", "nats:delay.in"), false},
		{"source code lost", stored(coded{target: codeField(17), source: 49}), withNames(env, "nats:kept", ""), false},
		{"bad code field", stored(coded{target: "\x00\x80", source: 33}), withNames(env, "", "nats:delay.in"), false},
		{"garbage body", string(binaryHeader(3, 1, 1000)) + "\x03\xff", Envelope{Payload: []byte("\x03\xff")}, false},
		{"empty body", string(binaryHeader(3, 1, 1000)), Envelope{Payload: []byte{}}, false},
		{"no header", "\x02abc", Envelope{Payload: []byte("\x02abc")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeStored(tc.raw, testID, table)
			if (err == nil) != tc.strict {
				t.Fatalf("strict decode: %v", err)
			}
			if got := salvageStored(tc.raw, testID, table); !reflect.DeepEqual(withPayload(got), withPayload(tc.want)) {
				t.Fatalf("salvaged\n %#v\nwant\n %#v", got, tc.want)
			}
		})
	}
}
