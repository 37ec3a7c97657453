package nats

import (
	"errors"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/broker"
)

// decodeAck takes the usual PubAck without a decode and everything else with one: a
// duplicate, the server's errors by code (a message over max_msg_size is a rejection as
// too_large), no stream (status 503), and answers that are no PubAck.
func TestDecodeAck(t *testing.T) {
	status := func(code string) natsgo.Header { return natsgo.Header{"Status": {code}} }
	for _, tc := range []struct {
		name    string
		data    string
		header  natsgo.Header
		dup     bool
		wantErr error
	}{
		{name: "usual", data: `{"stream":"OUT","seq":42}`},
		{name: "domain", data: `{"stream":"OUT","domain":"hub","seq":7}`},
		{name: "duplicate", data: `{"stream":"OUT","seq":1,"duplicate": true}`, dup: true},
		{name: "stream named error", data: `{"stream":"error","seq":3}`},
		{name: "too large", data: `{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`,
			wantErr: jetstream.ErrStreamMessageExceedsMaximum},
		{name: "no stream", header: status("503"), wantErr: jetstream.ErrNoStreamResponse},
		{name: "not json", data: `{"stream":"OUT",`, wantErr: jetstream.ErrInvalidJSAck},
		{name: "no stream field", data: `{"seq":1}`, wantErr: jetstream.ErrInvalidJSAck},
		{name: "empty", data: ``, wantErr: jetstream.ErrInvalidJSAck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dup, err := decodeAck(&natsgo.Msg{Data: []byte(tc.data), Header: tc.header})
			if dup != tc.dup || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("decodeAck(%q) = %v, %v; want %v, %v", tc.data, dup, err, tc.dup, tc.wantErr)
			}
		})
	}
	_, err := decodeAck(&natsgo.Msg{Data: []byte(`{"error":{"code":400,"err_code":10054,"description":"too big"}}`)})
	if reason, ok := broker.IsRejected(classify(err)); !ok || reason != contract.ReasonTooLarge {
		t.Fatalf("classify(%v) = %s, %v; want a rejection as too_large", err, reason, ok)
	}
}

// The reply subject of a publish names its call and index; anything else is ignored.
func TestParseAckSubject(t *testing.T) {
	c := &ackCall{id: 12, prefix: "_INBOX.abc.12."}
	id, i, ok := parseAckSubject(c.reply(345), len("_INBOX.abc."))
	if !ok || id != 12 || i != 345 {
		t.Fatalf("parse %q = %d %d %v", c.reply(345), id, i, ok)
	}
	for _, s := range []string{"_INBOX.abc.", "_INBOX.abc.12", "_INBOX.abc.12.", "_INBOX.abc..3", "_INBOX.abc.x.3",
		"_INBOX.abc.1.-3", "_INBOX.abc.1.99999999999", "_INBOX.abc.99999999999999999999.1"} {
		if _, _, ok := parseAckSubject(s, len("_INBOX.abc.")); ok {
			t.Errorf("parse %q: ok, want ignored", s)
		}
	}
}

// An entry is resolved once: a late acknowledgement does not replace the error the call
// gave up with, and done closes when the last one is resolved.
func TestAckCallResolvesOnce(t *testing.T) {
	a := &acks{calls: map[uint64]*ackCall{}}
	a.sub = &natsgo.Subscription{} // no subscribing: start only registers
	c, err := a.start(2)
	if err != nil {
		t.Fatal(err)
	}
	c.resolve(0, false, nil)
	select {
	case <-c.done:
		t.Fatal("done with one of two resolved")
	default:
	}
	give := errors.New("gave up")
	c.giveUp(give)
	c.resolve(1, false, nil) // late
	<-c.done
	if r := c.result(1); !errors.Is(r.err, give) {
		t.Fatalf("entry 1 = %+v, want the give-up error", r)
	}
	if r := c.result(0); r.err != nil {
		t.Fatalf("entry 0 = %+v, want acknowledged", r)
	}
	a.finish(c)
	if len(a.calls) != 0 {
		t.Fatal("call still registered after finish")
	}
}
