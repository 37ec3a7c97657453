package kafka_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/broker/brokertest"
	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// subscribeReceived is e.subscribe through the fast path.
func (e *env) subscribeReceived(t *testing.T, cfg wmkafka.SubscriberConfig, h *recorder, topic string) (*wmkafka.Subscriber, <-chan *headers.Received) {
	t.Helper()
	s := e.subscriber(t, cfg, h)
	ch, ok, err := s.SubscribeReceived(context.Background(), topic)
	if err != nil || !ok {
		t.Fatalf("subscribe %s: %v, %v", topic, ok, err)
	}
	return s, ch
}

// nextReceived returns the next message of ch, failing after waitFor.
func nextReceived(t *testing.T, ch <-chan *headers.Received) *headers.Received {
	t.Helper()
	return brokertest.NextReceived(t, ch, waitFor)
}

// receivedByOffset takes n messages of partition 0 and returns them by offset.
func receivedByOffset(t *testing.T, ch <-chan *headers.Received, n int) []*headers.Received {
	t.Helper()
	out := make([]*headers.Received, n)
	for range n {
		r := nextReceived(t, ch)
		off, err := strconv.Atoi(r.SourceID[strings.LastIndexByte(r.SourceID, ':')+1:])
		if err != nil || off >= n || out[off] != nil {
			t.Fatalf("unexpected source id %q: %v", r.SourceID, err)
		}
		out[off] = r
	}
	return out
}

// The fast path hands out what Subscribe's messages say, field by field (as ingress reads
// a watermill message: headers.FromMetadata and the reserved keys): headers in the same
// order (record order with a repeated or reserved key, else sorted), a producer's reserved
// one kept as a header (never taken as the source id), a null header value null (empty
// in Subscribe's metadata), the UUID header as the id, binary, null and empty keys, a
// tombstone, source id and time.
func TestReceivedMatchesSubscribe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "same", 1)
	ts := time.UnixMilli(1_700_000_000_123)
	e.produceRecords(t,
		&kgo.Record{Topic: "same", Key: []byte{0x00, 0xff, 'k'}, Value: []byte("one"), Timestamp: ts, Headers: []kgo.RecordHeader{
			{Key: "x", Value: []byte("1")}, {Key: "X-Mixed-Case", Value: []byte("v")}, {Key: "x", Value: []byte("2")},
			{Key: headers.MetaSourceID, Value: []byte("kafka:spoof:9:9")}, {Key: "Msg-Id", Value: []byte("id-1")},
		}},
		&kgo.Record{Topic: "same", Value: []byte("two"), Headers: []kgo.RecordHeader{
			{Key: "z", Value: []byte("1")}, {Key: "a", Value: []byte{0x01, 0x00}}, {Key: "m", Value: nil},
		}},
		&kgo.Record{Topic: "same", Key: []byte{}, Value: []byte("empty key")},
		&kgo.Record{Topic: "same", Key: []byte("k"), Value: nil}, // a tombstone
	)
	cfg := e.subCfg("slow")
	cfg.UUIDHeader = "msg-id"
	_, wm := e.subscribe(t, cfg, nil, "same")
	slow := receiveByOffset(t, wm, 4)
	cfg.GroupID = "fast"
	_, fast := e.subscribeReceived(t, cfg, nil, "same")
	got := receivedByOffset(t, fast, 4)
	for i := range slow {
		want := fromMetadata(slow[i])
		if i > 0 {
			want.ID = "" // no UUID header: Subscribe makes a ULID, the fast path none (ingress makes one when it needs it)
		}
		g := got[i]
		// The fast path keeps the record's order; Subscribe's metadata map keeps it only
		// when a key repeats (headers.FromMetadata sorts the others).
		// Metadata has no null value: compare values only.
		sorted := func(l headers.List) headers.List {
			l = slices.Clone(l)
			for i := range l {
				l[i].Null = false
			}
			return slices.SortedStableFunc(slices.Values(l), func(a, b headers.Header) int { return strings.Compare(a.Key, b.Key) })
		}
		if g.ID != want.ID || !slices.Equal(sorted(g.Headers), sorted(want.Headers)) || !bytes.Equal(g.Payload, want.Payload) ||
			(g.Payload == nil) != (want.Payload == nil) || !bytes.Equal(g.Key, want.Key) || (g.Key == nil) != (want.Key == nil) ||
			g.Tombstone != want.Tombstone || g.SourceID != want.SourceID || g.SourceTime != want.SourceTime || g.Request {
			t.Errorf("offset %d: fast path\n%+v\nSubscribe\n%+v", i, g.Message, want.Message)
			t.Errorf("source %q %q, want %q %q", g.SourceID, g.SourceTime, want.SourceID, want.SourceTime)
		}
		g.Ack("")
		slow[i].Ack()
	}
	if want := (headers.List{{Key: "z", Value: "1"}, {Key: "a", Value: "\x01\x00"}, {Key: "m", Null: true}}); !slices.Equal(got[1].Headers, want) {
		t.Errorf("fast path headers %q, want the record's order %q", got[1].Headers, want)
	}
	if v, ok := got[0].Headers.Get(headers.MetaSourceID); !ok || v != "kafka:spoof:9:9" || got[0].SourceID != "kafka:same:0:0" {
		t.Errorf("a producer's %s header: %q %v in the headers, source id %q", headers.MetaSourceID, v, ok, got[0].SourceID)
	}
	if got[0].ID != "id-1" || got[0].SourceTime != "1700000000123" || !got[3].Tombstone {
		t.Errorf("id %q, time %q, tombstone %v", got[0].ID, got[0].SourceTime, got[3].Tombstone)
	}
}

// fromMetadata reads a watermill message as ingress does (ingress.fromWatermill).
func fromMetadata(m *message.Message) headers.Received {
	md := m.Metadata
	r := headers.Received{Message: headers.Message{ID: m.UUID, Headers: headers.FromMetadata(md), Payload: m.Payload,
		Tombstone: md[headers.MetaKafkaTombstone] != ""},
		SourceID: md[headers.MetaSourceID], SourceTime: md[headers.MetaSourceTime]}
	if k, ok := md[headers.MetaKafkaKey]; ok {
		r.Key = []byte(k)
	}
	return r
}

// Acks and nacks on the fast path: the commit moves only over contiguous acks, a nacked
// record is handed out again (a new Received, the same fields) and holds the commit, a
// second Ack of one delivery counts once, and no goroutine is started per message.
func TestReceivedAcksAndNacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "fastack", 1)
	const n = 300
	e.produce(t, "fastack", 1, n)
	rec := newRecorder()
	before := adapterGoroutines()
	_, ch := e.subscribeReceived(t, e.subCfg("g"), rec, "fastack")
	rs := receivedByOffset(t, ch, n)
	if g := adapterGoroutines() - before; g > 50 {
		t.Fatalf("%d adapter goroutines with %d messages out, want a few (none per message)", g, n)
	}
	rs[1].Nack()
	rs[1].Ack("") // settled already: nothing
	for i := range n {
		if i != 1 {
			rs[i].Ack("")
		}
	}
	again := nextReceived(t, ch)
	if again == rs[1] || again.SourceID != rs[1].SourceID || !bytes.Equal(again.Payload, rs[1].Payload) ||
		!slices.Equal(again.Headers, rs[1].Headers) {
		t.Fatalf("redelivery %+v differs from %+v", again, rs[1])
	}
	rec.waitCommit(t, 1)
	for _, c := range rec.commitList() {
		if c > 1 {
			t.Fatalf("committed %d past the nacked offset 1", c)
		}
	}
	again.Ack("")
	rec.waitCommit(t, n)
	e.waitCommitted(t, "g", "fastack", n)
}

// Messages out when the subscriber closes: Close drains and returns; their late Acks and
// Nacks return at once and count for nothing; the next member gets them again.
func TestReceivedLateSettleAfterClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "fastlate", 1)
	e.produce(t, "fastlate", 1, 3)
	s, ch := e.subscribeReceived(t, e.subCfg("g"), nil, "fastlate")
	rs := receivedByOffset(t, ch, 3)
	rs[0].Ack("")
	e.waitCommitted(t, "g", "fastlate", 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		rs[1].Ack("")
		rs[2].Nack()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("a settle after Close blocked")
	}
	if got := e.committed(t, "g", "fastlate", 1); got[0] != 1 {
		t.Fatalf("committed %d after late acks, want 1", got[0])
	}
	_, ch2 := e.subscribeReceived(t, e.subCfg("g"), nil, "fastlate")
	if r := nextReceived(t, ch2); r.SourceID != "kafka:fastlate:0:1" {
		t.Fatalf("next member starts with %s, want offset 1", r.SourceID)
	}
}
