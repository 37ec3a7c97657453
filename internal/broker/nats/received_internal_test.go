package nats

import (
	"testing"
	"time"
)

// parseJSReply reads what jetstream.Msg.Metadata reads from an ack subject (v1 and v2,
// with and without the trailing token), and refuses what it refuses.
func TestParseJSReply(t *testing.T) {
	for _, tc := range []struct {
		subject string
		stream  string
		seq, ns uint64
	}{
		{"$JS.ACK.IN.cons.1.42.7.1700000000123456789.3", "IN", 42, 1700000000123456789},
		{"$JS.ACK._.hash.IN.cons.2.43.8.1700000000999999999.0.tok", "IN", 43, 1700000000999999999},
		{"$JS.ACK.dom.hash.ORDERS.c.1.18446744073709551615.1.5.0", "ORDERS", 18446744073709551615, 5},
		{"$JS.ACK.IN.cons.1.4x.7.12.3", "IN", 0, 12}, // not a number: 0, as nats.go
	} {
		stream, seq, ns, ok := parseJSReply(tc.subject)
		if !ok || stream != tc.stream || seq != tc.seq || ns != tc.ns {
			t.Errorf("parse %q = %q %d %d %v; want %q %d %d", tc.subject, stream, seq, ns, ok, tc.stream, tc.seq, tc.ns)
		}
	}
	for _, s := range []string{"", "_INBOX.x.y", "$JS.ACK.IN.cons.1.42.7.17", "$JS.ACK.a.b.IN.cons.1.42.7.17",
		"$JS.NAK.IN.cons.1.42.7.1700000000123456789.3"} {
		if _, _, _, ok := parseJSReply(s); ok {
			t.Errorf("parse %q: ok, want refused", s)
		}
	}
}

// The source id and time come as one string cut in two: js:<stream>:<seq> and the time in
// unix ms (as time.Unix(0, ns).UnixMilli()).
func TestSourceIDAndTime(t *testing.T) {
	ns := uint64(1700000000123456789)
	id, ms := sourceIDAndTime("IN", 42, ns)
	if want := time.Unix(0, int64(ns)).UnixMilli(); id != "js:IN:42" || ms != "1700000000123" || want != 1700000000123 {
		t.Fatalf("= %q %q", id, ms)
	}
	if id, ms := sourceIDAndTime("S", 1, 0); id != "js:S:1" || ms != "0" {
		t.Fatalf("zero time: %q %q", id, ms)
	}
}
