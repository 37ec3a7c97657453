package delaystore

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// testID is the message id the envelope tests encode and decode bodies for.
const testID = "msg-1"

func TestBodyRoundTrip(t *testing.T) {
	binary := make([]byte, 300)
	for i := range binary {
		binary[i] = byte(i)
	}
	tests := []struct {
		name string
		env  Envelope
	}{
		{"zero", Envelope{}},
		{"nil key", Envelope{Target: "nats:a", Source: "http", Key: nil, Payload: []byte("x")}},
		{"empty key", Envelope{Target: "nats:a", Source: "http", Key: []byte{}, Payload: []byte("x")}},
		{"key", Envelope{Target: "kafka:t", Source: "kafka:delay.in", Key: []byte{0, 1, 2, 0xff}}},
		{"source id", Envelope{SourceID: "js:IN:42", Target: "nats:a", Source: "nats:delay.in", Payload: []byte("x")}},
		{"source id is the id", Envelope{SourceID: testID, Target: "nats:a", Source: "nats:delay.in", Payload: []byte("x")}},
		{"long source id", Envelope{SourceID: "kafka:" + string(bytes.Repeat([]byte("t"), 249)) + ":2:9000000000", Target: "kafka:t", Source: "kafka:delay.in"}},
		{"repeated headers in order", Envelope{
			Target: "nats:orders.timeout", Source: "nats:delay.in",
			Headers: headers.List{{Key: "a", Value: "1"}, {Key: "B", Value: ""}, {Key: "a", Value: "2"}, {Key: "", Value: "v"}, {Key: "a", Value: "0"}},
			Payload: []byte("hello"),
		}},
		{"binary payload", Envelope{Target: "nats:x", Source: "http", Payload: binary}},
		{"payload with commas and prefix-like text", Envelope{Target: "1,2,3,", Source: ",", Payload: []byte("7,0,1700000000000,\x01")}},
		{"long strings", Envelope{Target: string(bytes.Repeat([]byte("t"), 200)), Source: "s", Headers: headers.List{{Key: "k", Value: string(binary)}}}},
		{"expires", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "h", Value: "v"}}, Expires: 90 * time.Second, Payload: []byte("x")}},
		{"expires without headers", Envelope{Target: "nats:a", Source: "http", Expires: time.Millisecond}},
		{"every", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "h", Value: "v"}}, Every: "CRON_TZ=Europe/Berlin 0 9 * * 1-5"}},
		{"every and expires", Envelope{Target: "nats:a", Source: "http", Expires: time.Minute, Every: "30s", Payload: []byte("x")}},
		{"misfire", Envelope{Target: "nats:a", Source: "http", Every: "1s", Misfire: "skip"}},
		{"misfire, expires and every", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "h", Value: "v"}},
			Expires: time.Minute, Every: "0 9 * * *", Misfire: "all", Payload: []byte("x")}},
		{"tombstone", Envelope{Target: "kafka:a", Source: "kafka:in", Key: []byte("k"), Tombstone: true}},
		{"tombstone with every", Envelope{Target: "kafka:a", Source: "kafka:in", Tombstone: true, Every: "1s", Misfire: "skip", Expires: time.Second}},
		{"window", Envelope{Target: "nats:a", Source: "http", Window: 10 * time.Second, Payload: []byte("x")}},
		{"window of a recurring message, with everything", Envelope{Target: "kafka:a", Source: "kafka:in", Tombstone: true, Every: "1h",
			Misfire: "all", Expires: time.Second, Window: time.Hour, Anchor: 1_795_273_445_000}},
		{"bound", Envelope{Target: "nats:a", Source: "nats:delay.in", MaxWait: 3 * time.Second, DueBy: 1_795_273_448_000, Payload: []byte("x")}},
		{"bound before park", Envelope{Target: "nats:a", Source: "http", MaxWait: time.Millisecond}},
		{"bound with a coded-like source, key, headers and hops", Envelope{SourceID: "js:IN:9", Target: "kafka:a", Source: "kafka:in", Key: []byte("k"),
			Headers: headers.List{{Key: "h", Value: "v"}, {Key: "x-delay-hops", Value: "1"}}, Expires: time.Second, MaxWait: 8760 * time.Hour, DueBy: 1<<53 - 1}},
		{"hops", Envelope{Target: "nats:a", Source: "nats:delay.in", Headers: headers.List{{Key: "h", Value: "v"}, {Key: "x-delay-hops", Value: "1"}}, Payload: []byte("x")}},
		{"hops only, with every", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "x-delay-hops", Value: "18446744073709551615"}}, Every: "1s"}},
		{"hops not last", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "x-delay-hops", Value: "2"}, {Key: "h", Value: "v"}}}},
		{"hops twice", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "x-delay-hops", Value: "2"}, {Key: "x-delay-hops", Value: "3"}}}},
		{"hops not canonical", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "x-delay-hops", Value: "01"}}}},
		{"hops not a count", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "x-delay-hops", Value: "x"}}}},
		{"hops other case", Envelope{Target: "nats:a", Source: "http", Headers: headers.List{{Key: "X-Delay-Hops", Value: "1"}}}},
		{"targets and sources without a broker prefix", Envelope{Target: "nats", Source: "httpx"}},
		{"empty names after the prefix", Envelope{Target: "kafka:", Source: "nats:"}},
		{"source with a prefix-like name", Envelope{Target: "nats:nats:a", Source: "kafka:http"}},
		{"null header values", Envelope{Target: "kafka:a", Source: "kafka:in", Headers: headers.List{{Key: "n", Null: true}, {Key: "e"},
			{Key: "s", Value: "x"}, {Key: "n", Null: true}, {Key: "x-delay-hops", Value: "1"}}, Payload: []byte("x")}},
		{"null header value with everything", Envelope{Target: "kafka:a", Source: "kafka:in", Headers: headers.List{{Key: "e"}, {Key: "n", Null: true}},
			Tombstone: true, Every: "1h", Misfire: "all", Expires: time.Second, Window: time.Hour, Anchor: 1_795_273_445_000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := encodeBody(tt.env, testID)
			if want := map[string]byte{"": formatNoSource, testID: formatSourceIsID}[tt.env.SourceID]; want != 0 && b[0] != want ||
				want == 0 && b[0] != formatSource {
				t.Fatalf("format byte %d for source id %q", b[0], tt.env.SourceID)
			}
			got, err := decodeBody(b, testID)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			want := tt.env
			if len(want.Payload) == 0 {
				want.Payload = got.Payload // empty and nil payloads are equivalent
			}
			if len(got.Payload) != len(tt.env.Payload) {
				t.Fatalf("payload %q, want %q", got.Payload, tt.env.Payload)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, want)
			}
			if (got.Key == nil) != (tt.env.Key == nil) {
				t.Fatalf("key nil-ness changed: got %v want %v", got.Key == nil, tt.env.Key == nil)
			}
			// Through the stored form written by the scripts.
			for _, h := range []string{string(binaryHeader(12, 3, 1700000000123))} {
				st, env2, err := decodeStored(h+string(b), testID, nil)
				if err != nil {
					t.Fatalf("decodeStored: %v", err)
				}
				if st.version != 12 || st.attempts != 3 || st.due != 1700000000123 || st.headerLen != len(h) {
					t.Fatalf("header %q = %+v", h, st)
				}
				if !reflect.DeepEqual(env2, got) {
					t.Fatalf("stored round trip: %#v", env2)
				}
			}
		})
	}
}

// TestMetaOrder: the misfire policy is stored before expires and every, so a bridge that
// predates it (reading every, then expires, from the end) still finds both, and sees
// the policy as a reserved header, which it never delivers (it fires as once).
func TestMetaOrder(t *testing.T) {
	env := Envelope{Expires: time.Minute, Every: "1s", Misfire: "skip", Tombstone: true, Window: 1500 * time.Millisecond, Anchor: 7,
		Target: "nats:a", Headers: headers.List{{Key: "h", Value: "v"}, {Key: "n", Null: true}, {Key: "e"}, {Key: "m", Null: true}}, Payload: []byte{}}
	got := env.metaHeaders(1_700_000_000_123)
	want := headers.List{{Key: metaSent, Value: "1700000000123"}, {Key: metaNulls, Value: "1,3"}, {Key: metaWindow, Value: "1500,7"}, {Key: metaTombstone, Value: "1"}, {Key: metaMisfire, Value: "skip"}, {Key: metaExpires, Value: "60000"}, {Key: metaEvery, Value: "1s"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("meta headers %v, want %v", got, want)
	}
	// The source time is dropped by the decoder: the envelope reads back as it was.
	if back, err := decodeBody(encodeBodySent(env, testID, 1_700_000_000_123, coded{}), testID); err != nil || !reflect.DeepEqual(back, env) {
		t.Fatalf("round trip with a source time: %#v %v", back, err)
	}
	if !headers.IsReserved(metaMisfire) || !headers.IsReserved(metaWindow) || !headers.IsReserved(metaNulls) {
		t.Fatal("the misfire, window or nulls field is not a reserved header")
	}
}

func TestDecodeBodyCorrupt(t *testing.T) {
	good := encodeBody(Envelope{SourceID: "js:IN:1", Target: "nats:a", Source: "http", Key: []byte("k"),
		Headers: headers.List{{Key: "h", Value: "v"}}, Payload: []byte("p")}, testID)
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"unknown format", []byte{7, 0, 0, 0, 0, 0}},
		{"no flags", []byte{formatNoSource}},
		{"unused flag bit", []byte{formatNoSource, 0x80, 0, 0}},
		{"target prefix 3", []byte{formatNoSource, 3, 0, 0}},
		{"bound flag without the field", []byte{formatNoSource, flagBound, 1, 'a', 0}},
		{"reserved flag bit 1", []byte{formatNoSource, flagReserved, 1, 'a', 0}},
		{"bound with max wait 0", []byte{formatNoSource, flagSourceHTTP | flagBound, 0, 0, 5}},
		{"bound without due by", []byte{formatNoSource, flagSourceHTTP | flagBound, 0, 5}},
		{"bound with an overlong due by", []byte{formatNoSource, flagSourceHTTP | flagBound, 0, 5, 0x80, 0}},
		{"bound due by beyond 2^53", []byte{formatNoSource, flagSourceHTTP | flagBound, 0, 5, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10}},
		{"source keeps its prefix", []byte{formatNoSource, 0, 0, 7, 'k', 'a', 'f', 'k', 'a', ':', 'a'}},
		{"source http as a field", []byte{formatNoSource, 0, 0, 4, 'h', 't', 't', 'p'}},
		{"empty header list", []byte{formatNoSource, flagSourceHTTP | flagHeaders, 0, 0}},
		{"hops as a header", []byte{formatNoSource, flagSourceHTTP | flagHeaders, 0, 1, 12, 'x', '-', 'd', 'e', 'l', 'a', 'y', '-', 'h', 'o', 'p', 's', 1, '1'}},
		{"truncated hops", []byte{formatNoSource, flagSourceHTTP | flagHops, 0}},
		{"overlong hops", []byte{formatNoSource, flagSourceHTTP | flagHops, 0, 0x81, 0}},
		{"truncated key", []byte{formatNoSource, flagSourceHTTP | flagKey, 0, 3, 'k'}},
		{"empty source id field", []byte{formatSource, 0, flagSourceHTTP, 0}},
		{"format 0", []byte{0, 0, 0, 0, 0}},
		{"truncated target length", []byte{1, 0x80}},
		{"truncated source id", []byte{3, 5, 'j', 's'}},
		{"empty source id field", []byte{3, 0, 0, 0, 0, 0}},
		{"source id field equal to the id", append(append([]byte{3, byte(len(testID))}, testID...), 0, 0, 0, 0)},
		{"format 2 without fields", []byte{2}},
		{"target too long", []byte{1, 10, 'a'}},
		{"missing source", []byte{1, 0, 0}},
		{"huge header count", append([]byte{1, flagSourceHTTP | flagHeaders, 0}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)},
		{"truncated header", []byte{1, flagSourceHTTP | flagHeaders, 0, 2, 1, 'a', 1}},
		{"uvarint overflow", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"expires zero", withHeader(metaExpires, "0")},
		{"expires not canonical", withHeader(metaExpires, "0100")},
		{"expires not a number", withHeader(metaExpires, "5m")},
		{"expires overflows", withHeader(metaExpires, "9223372036854776")},
		{"empty schedule", withHeader(metaEvery, "")},
		{"empty misfire policy", withHeader(metaMisfire, "")},
		{"tombstone flag not 1", withHeader(metaTombstone, "true")},
		{"window zero", withHeader(metaWindow, "0")},
		{"window beyond an hour", withHeader(metaWindow, "3600001")},
		{"window not canonical", withHeader(metaWindow, "010")},
		{"window with an empty anchor", withHeader(metaWindow, "10,")},
		{"window with a bad anchor", withHeader(metaWindow, "10,-5")},
		{"window with two anchors", withHeader(metaWindow, "10,5,5")},
		{"empty null list", withHeaders("a", "", metaNulls, "")},
		{"null index out of range", withHeaders("a", "", metaNulls, "1")},
		{"null index of the list itself", withHeader(metaNulls, "0")},
		{"null index not canonical", withHeaders("a", "", metaNulls, "00")},
		{"null index negative", withHeaders("a", "", metaNulls, "-0")},
		{"null indices descending", withHeaders("a", "", "b", "", metaNulls, "1,0")},
		{"null index twice", withHeaders("a", "", "b", "", metaNulls, "0,0")},
		{"null index with a space", withHeaders("a", "", "b", "", metaNulls, "0, 1")},
		{"null header with a value", withHeaders("a", "v", metaNulls, "0")},
		{"null index of the source time", withHeaders("a", "", metaSent, "1", metaNulls, "1")},
	}
	for i := 1; i < len(good)-1; i++ { // every truncation inside the header part
		if i < len(good)-1-len("p") {
			tests = append(tests, struct {
				name string
				b    []byte
			}{"truncated at " + strconv.Itoa(i), good[:i]})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeBody(tt.b, testID); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// withHeader is a body (source http, target "") with one header k: v and no payload.
func withHeader(k, v string) []byte {
	b := []byte{formatNoSource, flagSourceHTTP | flagHeaders, 0, 1}
	return appendString(appendString(b, k), v)
}

// withHeaders is withHeader with the headers kv (key, value, ...).
func withHeaders(kv ...string) []byte {
	b := []byte{formatNoSource, flagSourceHTTP | flagHeaders, 0, byte(len(kv) / 2)}
	for _, s := range kv {
		b = appendString(b, s)
	}
	return b
}

func TestParseStoredCorrupt(t *testing.T) {
	for _, s := range []string{"", "1,2", "1,2,3", "1,0,1,x", "12,3,1700000000123,\x01\x0c\x00",
		"\x01", "\x01\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00", // truncated
		"\x02\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01", // not the header byte
	} {
		t.Run(strconv.Quote(s), func(t *testing.T) {
			if _, _, err := decodeStored(s, testID, nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func FuzzDecodeBody(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(encodeBody(Envelope{}, testID))
	f.Add(encodeBody(Envelope{Target: "nats:a", Source: "http", Key: []byte{}, Payload: []byte("x")}, testID))
	f.Add(encodeBody(Envelope{Target: "t", Headers: headers.List{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}}, Key: []byte("k")}, testID))
	f.Add(encodeBody(Envelope{SourceID: testID, Target: "t"}, testID))
	f.Add(encodeBody(Envelope{SourceID: "kafka:in:0:7", Target: "t"}, testID))
	f.Add(encodeBody(Envelope{Target: "t", Source: "kafka:in", MaxWait: time.Second, DueBy: 1700000003123}, testID))
	f.Add(encodeBody(Envelope{Target: "t", Headers: headers.List{{Key: "a", Null: true}, {Key: "b"}, {Key: "a", Null: true}}, Every: "1s"}, testID))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := decodeBody(b, testID)
		salvaged := salvageStored(string(binaryHeader(1, 0, 1))+string(b), testID, nil) // never panics
		if err == nil && !reflect.DeepEqual(withPayload(salvaged), withPayload(env)) {
			t.Fatalf("salvage of a body that decodes: %#v, decoded %#v", salvaged, env)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode to the same bytes (the format is canonical).
		again := encodeBody(env, testID)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encode differs:\n in %x\nout %x", b, again)
		}
		if back, err := decodeBody(again, testID); err != nil || !reflect.DeepEqual(withPayload(back), withPayload(env)) {
			t.Fatalf("re-encoding of %x reads back as %#v, %v", b, back, err)
		}
		_, _, _ = decodeStored(string(binaryHeader(1, 0, 1))+string(b), testID, nil)
	})
}

// TestDecodeBodyLiteral pins the body layout with literal bytes: a change to it is a new
// store format (docs/operating.md, "Store format").
func TestDecodeBodyLiteral(t *testing.T) {
	b := []byte("\x03\x07js:IN:1" + // format 3, source id
		"\x74" + // flags: source nats:, key, headers, hops
		"\x0fnats:orders.out" + "\x08delay.in" + // target, source without "nats:"
		"\x01k" + // key
		"\x02\x01a\x011" + "\x12_delaybridge_every\x021s" + // a header, then the schedule
		"\x03" + // hops
		"payload,1,2")
	want := Envelope{SourceID: "js:IN:1", Target: "nats:orders.out", Source: "nats:delay.in", Key: []byte("k"),
		Headers: headers.List{{Key: "a", Value: "1"}, {Key: "x-delay-hops", Value: "3"}}, Every: "1s", Payload: []byte("payload,1,2")}
	got, err := decodeBody(b, testID)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("body:\n got %#v, %v\nwant %#v", got, err, want)
	}
	if e := encodeBody(want, testID); !bytes.Equal(e, b) {
		t.Fatalf("encoded as %q\nwant %q", e, b)
	}
	// Kafka names, the source "http", no key, no headers, no hops; the source id is the id.
	b = []byte("\x02\x0c\x07kafka:t" + "v")
	want = Envelope{SourceID: testID, Target: "kafka:t", Source: "http", Payload: []byte("v")}
	if got, err := decodeBody(b, testID); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("kafka body:\n got %#v, %v\nwant %#v", got, err, want)
	}
	if e := encodeBody(want, testID); !bytes.Equal(e, b) {
		t.Fatalf("encoded as %q\nwant %q", e, b)
	}
	// Kafka header values null (the first and third, stored empty) and empty (the second):
	// the indices of the null ones as the trailing reserved header _delaybridge_nulls.
	b = []byte("\x01\x28\x07kafka:t\x02in" + // format 1, flags source kafka:, headers; target, source
		"\x04\x01n\x00\x01e\x00\x01n\x00" + "\x12_delaybridge_nulls\x030,2" +
		"v")
	want = Envelope{Target: "kafka:t", Source: "kafka:in", Headers: headers.List{{Key: "n", Null: true}, {Key: "e"}, {Key: "n", Null: true}},
		Payload: []byte("v")}
	if got, err := decodeBody(b, testID); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("null headers body:\n got %#v, %v\nwant %#v", got, err, want)
	}
	if e := encodeBody(want, testID); !bytes.Equal(e, b) {
		t.Fatalf("encoded as %q\nwant %q", e, b)
	}
	// A debounced message: flags bit 0, the bound field after the source (max wait 3000 ms,
	// due by 1700000003123 ms, uvarints).
	b = []byte("\x01\x0d\x06nats:a" + "\xb8\x17" + "\xb3\xe8\x95\xff\xbc\x31" + "v")
	want = Envelope{Target: "nats:a", Source: "http", MaxWait: 3 * time.Second, DueBy: 1700000003123, Payload: []byte("v")}
	if got, err := decodeBody(b, testID); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("bound body:\n got %#v, %v\nwant %#v", got, err, want)
	}
	if e := encodeBody(want, testID); !bytes.Equal(e, b) {
		t.Fatalf("encoded as %q\nwant %q", e, b)
	}
	// The binary header: version 300, attempts 2, due 1700000000123 (0x18bcfe5687b).
	const h = "\x01" + "\x00\x00\x00\x00\x01\x2c" + "\x00\x00\x02" + "\x01\x8b\xcf\xe5\x68\x7b"
	st, err := parseStored(h + string(b))
	if err != nil || st.version != 300 || st.attempts != 2 || st.due != 1700000000123 || st.body != string(b) {
		t.Fatalf("binary header: %+v %v", st, err)
	}
	if got := binaryHeader(300, 2, 1700000000123); string(got) != h {
		t.Fatalf("binary header written as %q", got)
	}
}

// withPayload is e with a nil payload made empty (they are equivalent).
func withPayload(e Envelope) Envelope {
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	return e
}

// TestLuaHeaderBothWays: envelope.lua's header and entry give the same bytes and numbers
// through Redis' struct library and through the arithmetic that an embedded Lua without
// it (miniredis: bridge dev) takes, and the bytes are Go's binaryHeader.
func TestLuaHeaderBothWays(t *testing.T) {
	lib, err := luaFile("envelope.lua")
	if err != nil {
		t.Fatal(err)
	}
	const structLine = "local STRUCT = rawget(_G, 'struct')"
	if !strings.Contains(lib, structLine) {
		t.Fatal("envelope.lua no longer picks the struct library as this test expects")
	}
	rdb := testredis.Client(t)
	probe := `
local v, a, d = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local h = header(v, a, d, true)
local v2, a2, d2, p = entry(h .. 'body')
return {h, string.format('%d,%d,%d,%d', v2, a2, d2, p)}`
	for _, c := range []struct {
		v int64
		a int
		d int64
	}{{1, 0, 0}, {300, 2, 1_700_000_000_123}, {1<<48 - 1, 1<<24 - 1, 1<<48 - 1}, {123456789, 10, 4_102_444_800_000}} {
		want := string(binaryHeader(c.v, c.a, c.d))
		for _, way := range []string{"struct", "arithmetic"} {
			script := lib
			if way == "arithmetic" {
				script = strings.Replace(lib, structLine, "local STRUCT = nil", 1)
			}
			r, err := rdb.Eval(t.Context(), script+probe, nil, c.v, c.a, c.d).StringSlice()
			if err != nil || len(r) != 2 {
				t.Fatalf("%s %+v: %v %v", way, c, r, err)
			}
			if r[0] != want || r[1] != fmt.Sprintf("%d,%d,%d,17", c.v, c.a, c.d) {
				t.Errorf("%s %+v: header %q, entry %s; want %q", way, c, r[0], r[1], want)
			}
		}
	}
}

// Null header values (Header.Null) survive the store: parked with a source time (the
// first trailing reserved header, with the null list after it), read back by Get and by
// Claim as they were; cancel.lua still finds the source time, so a cancel older than the
// message does not delete it.
func TestNullHeadersThroughTheStore(t *testing.T) {
	f := setup(t)
	env := Envelope{Target: "kafka:out", Source: "kafka:in", SourceID: "kafka:in:0:5", Key: []byte("k"),
		Headers: headers.List{{Key: "n", Null: true}, {Key: "e"}, {Key: "s", Value: "x"}, {Key: "x-delay-hops", Value: "1"}},
		Payload: []byte("p")}
	const published = 1_700_000_000_000
	f.park(t, ParkRequest{ID: "nulls", Replace: true, Delay: 50 * time.Millisecond, Published: published, Envelope: env})
	m, err := f.s.Get(t.Context(), "nulls")
	if err != nil || !reflect.DeepEqual(m.Envelope, env) {
		t.Fatalf("Get:\n got %v %v\nwant %v", m.Envelope.Headers, err, env.Headers)
	}
	if deleted, err := f.s.CancelAt(t.Context(), "nulls", published-1); err != nil || deleted {
		t.Fatalf("cancel older than the message: deleted %v, %v", deleted, err)
	}
	c, _ := f.claimID(t, "nulls", 5*time.Second)
	if !reflect.DeepEqual(c.Envelope, env) {
		t.Fatalf("Claim:\n got %v\nwant %v", c.Envelope.Headers, env.Headers)
	}
}
