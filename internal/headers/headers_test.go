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
		{name: "single keys come back sorted", in: List{{"b", "2"}, {"a", "1"}}, want: List{{"a", "1"}, {"b", "2"}}},
		{name: "repeated keys keep order", in: List{{"x", "1"}, {"a", "z"}, {"x", "2"}, {"x", "3"}}},
		{name: "case differs", in: List{{"X-Delay", "1"}, {"x-delay", "2"}}, want: List{{"X-Delay", "1"}, {"x-delay", "2"}}},
		{name: "empty value", in: List{{"k", ""}, {"k", ""}}},
		{name: "binary values in repeated keys", in: List{{"x", "1"}, {"x", "\xfe\x00\xff"}}},
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
	md := ToMetadata(List{{"a", "1"}, {"a", "2"}}, map[string]string{MetaSourceID: "js:S:1", MetaReply: "{}"})
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

func TestFromMetadataAppendsKeysSetLater(t *testing.T) {
	md := ToMetadata(List{{"a", "1"}, {"a", "2"}}, nil)
	md["b"] = "3"
	got := FromMetadata(md)
	want := List{{"a", "1"}, {"a", "2"}, {"b", "3"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestValuesCaseInsensitive(t *testing.T) {
	l := List{{"X-Delay", "1"}, {"other", "o"}, {"x-DELAY", "2"}}
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
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		if IsReserved(k1) || IsReserved(k2) {
			return
		}
		in := List{{k1, v1}, {k2, v2}, {k1, v2}} // k1 repeats: the encoded list is used
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
