package kafka_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// Issue 38 item 1: three transactions of 50 records each (commit, abort, commit) into the
// topic: the fast path (what ingress parks from) and Subscribe hand out exactly the 100
// committed records, none of the aborted ones, and a transaction's records only once it
// committed.
func TestAbortedTransactionsNeverHandedOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "txn.in", 2)
	tx, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID("txn-producer"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	txn := func(name string, commit bool) {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i := range 50 {
			recs = append(recs, &kgo.Record{Topic: "txn.in", Key: []byte(strconv.Itoa(i)), Value: []byte(name)})
		}
		if err := tx.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}

	// An open transaction is not handed out until it commits.
	_, fast := e.subscribeReceived(t, e.subCfg("txn-fast"), nil, "txn.in")
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Topic: "txn.in", Key: []byte("open"), Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-fast:
		t.Fatalf("record %s of an open transaction handed out", r.SourceID)
	case <-time.After(1500 * time.Millisecond):
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	txn("first", true)
	txn("aborted", false)
	txn("third", true)
	count := func(name string, payloads []string) map[string]int {
		out := map[string]int{}
		for _, p := range payloads {
			out[p]++
		}
		if out["aborted"] != 0 || out["first"] != 50 || out["third"] != 50 || out["open"] != 1 || len(payloads) != 101 {
			t.Errorf("%s: handed out %v, want first 50, third 50, open 1, aborted 0", name, out)
		}
		return out
	}
	var got []string
	for len(got) < 101 {
		r := nextReceived(t, fast)
		got = append(got, string(r.Payload))
		r.Ack("")
	}
	extra := drainFor(fast, time.Second)
	count("fast path", append(got, extra...))

	_, wm := e.subscribe(t, e.subCfg("txn-slow"), nil, "txn.in")
	got = got[:0]
	for len(got) < 101 {
		m := next(t, wm)
		got = append(got, string(m.Payload))
		m.Ack()
	}
	select {
	case m := <-wm:
		got = append(got, string(m.Payload))
	case <-time.After(time.Second):
	}
	count("Subscribe", got)
}

// drainFor returns the payloads of what ch hands out within d (acking each).
func drainFor(ch <-chan *headers.Received, d time.Duration) []string {
	var out []string
	deadline := time.After(d)
	for {
		select {
		case r := <-ch:
			out = append(out, string(r.Payload))
			r.Ack("")
		case <-deadline:
			return out
		}
	}
}

// Issue 38 item 2: a null value (a tombstone) is read as null from the record itself: the
// fast path hands out 500 tombstones and 500 empty values told apart, without a fetch
// request per tombstone (the kafka-go adapter sent one more per null value).
func TestTombstonesWithoutASecondFetch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "tomb.in", 1)
	const n = 1000
	var recs []*kgo.Record
	for i := range n {
		r := &kgo.Record{Topic: "tomb.in", Key: []byte(strconv.Itoa(i)), Value: []byte{}}
		if i%2 == 0 {
			r.Value = nil
		}
		recs = append(recs, r)
	}
	e.produceRecords(t, recs...)
	fetches := e.cluster.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Observe: true, Count: -1})
	defer fetches.Remove()

	_, fast := e.subscribeReceived(t, e.subCfg("tomb"), nil, "tomb.in")
	got := receivedByOffset(t, fast, n)
	for i, r := range got {
		if want := i%2 == 0; r.Tombstone != want || len(r.Payload) != 0 {
			t.Fatalf("offset %d: tombstone %v (payload %d bytes), want %v", i, r.Tombstone, len(r.Payload), want)
		}
		r.Ack("")
	}
	if hits := fetches.Hits(); hits >= n/2 {
		t.Fatalf("%d fetch requests for %d tombstones: a fetch per null value", hits, n/2)
	} else {
		t.Logf("%d records (%d tombstones) read in %d fetch requests", n, n/2, hits)
	}
}

// Issue 38 item 4: a produce whose answer is lost is sent again by the producer and
// written once: the brokers drop the second copy by its producer id and sequence. The
// first produce request is held at the broker until the publisher sent it again, then
// both are processed; the topic holds one record. A Publish that failed is retried as
// egress would retry it.
func TestRetriedProduceDoesNotDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "idem", 1)
	c := e.cluster.Kfake()
	var seen atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl() // every produce request of the test is the publisher's
		if seen.Add(1) == 1 {
			c.SleepControl(func() { <-release }) // the first copy waits for the second
		} else {
			once.Do(func() { close(release) })
		}
		return nil, nil, false // processed as usual
	})
	pub := e.publisher(t, wmkafka.PublisherConfig{WriteTimeout: 8 * time.Second})
	msg := message.NewMessage(watermill.NewUUID(), []byte("once"))
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = pub.Publish("idem", msg); err == nil {
			break
		}
		t.Logf("publish attempt %d: %v", attempt, err)
	}
	once.Do(func() { close(release) })
	if err != nil {
		t.Fatal(err)
	}
	if seen.Load() < 2 {
		t.Fatalf("%d produce requests: the first was not sent again", seen.Load())
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if end := endOffsets(t, e, "idem", 1)[0]; end != 1 {
			t.Fatalf("%d records of one message: a retried produce duplicated it", end)
		}
	}
	if recs := consume(t, e, "idem", 1); string(recs[0].Value) != "once" {
		t.Fatalf("record %q", recs[0].Value)
	}
}

// A null header value stays null through the fast path and PublishList (egress's fast
// path), told apart from an empty one: the received header is Null, the published one has
// a nil value again; an empty value stays empty and not null.
func TestNullHeaderValueRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "nullhdr.in", 1)
	testkafka.CreateTopic(t, e.brokers, "nullhdr.out", 1)
	e.produceRecords(t, &kgo.Record{Topic: "nullhdr.in", Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: "n", Value: nil}, {Key: "e", Value: []byte{}}, {Key: "s", Value: []byte("x")}, {Key: "n", Value: nil},
	}})
	_, fast := e.subscribeReceived(t, e.subCfg("nullhdr"), nil, "nullhdr.in")
	r := nextReceived(t, fast)
	want := headers.List{{Key: "n", Null: true}, {Key: "e"}, {Key: "s", Value: "x"}, {Key: "n", Null: true}}
	if !slices.Equal(r.Headers, want) {
		t.Fatalf("received headers %v, want %v", r.Headers, want)
	}
	r.Ack("")
	pub := e.publisher(t, wmkafka.PublisherConfig{})
	if err := pub.PublishList(context.Background(), "nullhdr.out", []headers.Message{r.Message}); err != nil {
		t.Fatal(err)
	}
	out := consume(t, e, "nullhdr.out", 1)[0]
	if len(out.Headers) != 4 {
		t.Fatalf("published headers %v, want 4", out.Headers)
	}
	for i, h := range out.Headers {
		if h.Key != want[i].Key || (h.Value == nil) != want[i].Null || string(h.Value) != want[i].Value {
			t.Errorf("published header %d: %q = %q (null %v), want %v", i, h.Key, h.Value, h.Value == nil, want[i])
		}
	}
}
