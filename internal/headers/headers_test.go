package headers

import (
	"reflect"
	"testing"
)

func TestMetadataRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   List
		want List // after round trip; nil means same as in
	}{
		{name: "empty", in: nil, want: nil},
		{name: "single keys come back sorted", in: List{{Key: "b", Value: "2"}, {Key: "a", Value: "1"}}, want: List{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}}},
		{name: "repeated keys keep order", in: List{{Key: "x", Value: "1"}, {Key: "a", Value: "z"}, {Key: "x", Value: "2"}, {Key: "x", Value: "3"}}},
		{name: "case differs", in: List{{Key: "X-Delay", Value: "1"}, {Key: "x-delay", Value: "2"}}, want: List{{Key: "X-Delay", Value: "1"}, {Key: "x-delay", Value: "2"}}},
		{name: "empty value", in: List{{Key: "k", Value: ""}, {Key: "k", Value: ""}}},
		{name: "binary values in repeated keys", in: List{{Key: "x", Value: "1"}, {Key: "x", Value: "\xfe\x00\xff"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromMetadata(ToMetadata(tt.in, nil))
			want := tt.want
			if want == nil {
				want = tt.in
			}
			if len(want) == 0 && len(got) == 0 {
				return
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip = %v, want %v", got, want)
			}
		})
	}
}

func TestReservedKeysNeverBecomeHeaders(t *testing.T) {
	md := ToMetadata(List{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}}, map[string]string{MetaSourceID: "js:S:1", MetaReply: "{}"})
	for _, h := range FromMetadata(md) {
		if IsReserved(h.Key) {
			t.Fatalf("reserved key %q returned as header", h.Key)
		}
	}
	if md[MetaSourceID] != "js:S:1" {
		t.Fatalf("extra metadata lost: %v", md)
	}
	if md["a"] != "2" {
		t.Fatalf("plain map should hold the last value, got %q", md["a"])
	}
}

// A producer's header with the reserved prefix stays in the header list (where intake
// refuses it), held inside MetaHeaders: never a plain key, which the bridge would take
// for its own metadata (the source id here).
func TestReservedHeaderOfAProducerIsNotMetadata(t *testing.T) {
	in := List{{Key: "a", Value: "1"}, {Key: MetaSourceID, Value: "kafka:forged:0:0"}, {Key: ReservedPrefix + "x", Value: "y"}}
	md := ToMetadata(in, map[string]string{MetaSourceID: "kafka:t:1:2"})
	if md[MetaSourceID] != "kafka:t:1:2" {
		t.Fatalf("source id %q, want the adapter's", md[MetaSourceID])
	}
	if _, ok := md[ReservedPrefix+"x"]; ok {
		t.Fatalf("a producer's reserved header became a plain metadata key: %q", md)
	}
	if got := FromMetadata(md); !reflect.DeepEqual(got, in) {
		t.Fatalf("FromMetadata = %v, want the producer's list %v", got, in)
	}
}

func TestFromMetadataAppendsKeysSetLater(t *testing.T) {
	md := ToMetadata(List{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}}, nil)
	md["b"] = "3"
	got := FromMetadata(md)
	want := List{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}, {Key: "b", Value: "3"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestValuesCaseInsensitive(t *testing.T) {
	l := List{{Key: "X-Delay", Value: "1"}, {Key: "other", Value: "o"}, {Key: "x-DELAY", Value: "2"}}
	if got := l.Values("x-delay"); !reflect.DeepEqual(got, []string{"1", "2"}) {
		t.Fatalf("Values = %v", got)
	}
	if v, ok := l.Get("OTHER"); !ok || v != "o" {
		t.Fatalf("Get = %q, %v", v, ok)
	}
	if _, ok := l.Get("missing"); ok {
		t.Fatal("Get found a missing key")
	}
}

func FuzzMetadataRoundTrip(f *testing.F) {
	f.Add("x", "1", "x", "\xfe")
	f.Add("a", "", "b", "")
	f.Add(MetaSourceID, "forged", "b", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		// k1 repeats: the encoded list is used (also when a key is reserved)
		in := List{{Key: k1, Value: v1}, {Key: k2, Value: v2}, {Key: k1, Value: v2}}
		got := FromMetadata(ToMetadata(in, nil))
		if !reflect.DeepEqual(got, in) {
			t.Fatalf("round trip %q -> %q", in, got)
		}
	})
}

func TestDecodeListRejectsGarbage(t *testing.T) {
	for _, s := range []string{"", "\x05", "\x01\x09a", "\x01\x01a\x05b", "\x01\x01a\x01bEXTRA"} {
		if _, ok := decodeList(s); ok {
			t.Errorf("decodeList(%q) accepted", s)
		}
	}
}
