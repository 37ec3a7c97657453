package delaystore

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/delaybridge/delaybridge/internal/headers"
)

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
		{"repeated headers in order", Envelope{
			Target: "nats:orders.timeout", Source: "nats:delay.in",
			Headers: headers.List{{Key: "a", Value: "1"}, {Key: "B", Value: ""}, {Key: "a", Value: "2"}, {Key: "", Value: "v"}, {Key: "a", Value: "0"}},
			Payload: []byte("hello"),
		}},
		{"binary payload", Envelope{Target: "nats:x", Source: "http", Payload: binary}},
		{"payload with commas and prefix-like text", Envelope{Target: "1,2,3,", Source: ",", Payload: []byte("7,0,1700000000000,\x01")}},
		{"long strings", Envelope{Target: string(bytes.Repeat([]byte("t"), 200)), Source: "s", Headers: headers.List{{Key: "k", Value: string(binary)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := encodeBody(tt.env)
			got, err := decodeBody(b)
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
			st, env2, err := decodeStored("12,3,1700000000123," + string(b))
			if err != nil {
				t.Fatalf("decodeStored: %v", err)
			}
			if st.version != 12 || st.attempts != 3 || st.due != 1700000000123 {
				t.Fatalf("prefix = %+v", st)
			}
			if !reflect.DeepEqual(env2, got) {
				t.Fatalf("stored round trip: %#v", env2)
			}
		})
	}
}

func TestDecodeBodyCorrupt(t *testing.T) {
	good := encodeBody(Envelope{Target: "nats:a", Source: "http", Key: []byte("k"),
		Headers: headers.List{{Key: "h", Value: "v"}}, Payload: []byte("p")})
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"unknown format", []byte{2, 0, 0, 0, 0}},
		{"truncated target length", []byte{1, 0x80}},
		{"target too long", []byte{1, 10, 'a'}},
		{"bad key flag", []byte{1, 0, 0, 7, 0}},
		{"missing key flag", []byte{1, 0, 0}},
		{"huge header count", append([]byte{1, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)},
		{"truncated header", []byte{1, 0, 0, 0, 2, 1, 'a', 1}},
		{"uvarint overflow", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
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
			if _, err := decodeBody(tt.b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestParseStoredCorrupt(t *testing.T) {
	for _, s := range []string{"", "1,2", "1,2,3", "a,0,1,x", "1,b,1,x", "1,0,c,x", "1,99999999999,1,x"} {
		t.Run(strconv.Quote(s), func(t *testing.T) {
			if _, _, err := decodeStored(s); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func FuzzDecodeBody(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(encodeBody(Envelope{}))
	f.Add(encodeBody(Envelope{Target: "nats:a", Source: "http", Key: []byte{}, Payload: []byte("x")}))
	f.Add(encodeBody(Envelope{Target: "t", Headers: headers.List{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}}, Key: []byte("k")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := decodeBody(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode to the same bytes (the format is canonical).
		if again := encodeBody(env); !bytes.Equal(again, b) {
			t.Fatalf("re-encode differs:\n in %x\nout %x", b, again)
		}
		_, _, _ = decodeStored("1,0,1," + string(b))
	})
}
