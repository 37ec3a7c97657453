package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/broker"
	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// The contract tests run the adapter against kfake. Records are produced and read
// back with franz-go (kgo), a client independent of kafka-go, and the group's committed
// offsets are read from the broker, the ground truth of what a restart resumes from.

const waitFor = 15 * time.Second

type env struct {
	cluster *testkafka.Cluster
	brokers []string
	kgo     *kgo.Client // producer: records go to the partition they name
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := testkafka.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &env{cluster: c, brokers: c.Brokers(), kgo: cl}
}

// subCfg is a subscriber configuration for group with short timeouts (kfake accepts
// sessions down to testkafka.MinSessionTimeout).
func (e *env) subCfg(group string) wmkafka.SubscriberConfig {
	return wmkafka.SubscriberConfig{
		Brokers:           e.brokers,
		GroupID:           group,
		SessionTimeout:    3 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  5 * time.Second,
		DrainTimeout:      time.Second,
	}
}

func (e *env) subscriber(t *testing.T, cfg wmkafka.SubscriberConfig, h *recorder) *wmkafka.Subscriber {
	t.Helper()
	s, err := wmkafka.NewSubscriber(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h != nil {
		wmkafka.SetHooks(s, h.hooks())
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (e *env) subscribe(t *testing.T, cfg wmkafka.SubscriberConfig, h *recorder, topic string) (*wmkafka.Subscriber, <-chan *message.Message) {
	t.Helper()
	s := e.subscriber(t, cfg, h)
	ch, err := s.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	return s, ch
}

func (e *env) publisher(t *testing.T, cfg wmkafka.PublisherConfig) *wmkafka.Publisher {
	t.Helper()
	cfg.Brokers = e.brokers
	p, err := wmkafka.NewPublisher(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// produce writes n records with values "0".."n-1", record i to partition i%partitions.
func (e *env) produce(t *testing.T, topic string, partitions, n int) {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte(strconv.Itoa(i))})
	}
	e.produceRecords(t, rs...)
}

func (e *env) produceRecords(t *testing.T, rs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.kgo.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// committed returns the group's committed offset per partition of topic (-1: none).
func (e *env) committed(t *testing.T, group, topic string, partitions int) []int64 {
	t.Helper()
	return testkafka.Committed(t, e.brokers, group, topic, partitions)
}

func (e *env) waitCommitted(t *testing.T, group, topic string, want ...int64) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		got := e.committed(t, group, topic, len(want))
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offsets of %s = %v, want %v", topic, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recorder keeps what the subscriber's hooks report.
type recorder struct {
	mu       sync.Mutex
	commits  []int64 // successful commits, in order (one topic and partition per test)
	resolved map[int64]int
	accepted map[[2]int64]int // acks counted, by partition and offset
	changed  chan struct{}
}

func newRecorder() *recorder {
	return &recorder{resolved: map[int64]int{}, accepted: map[[2]int64]int{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) hooks() wmkafka.Hooks {
	notify := func() {
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	return wmkafka.Hooks{
		Resolved: func(_ string, partition int, offset int64, acked bool) {
			r.mu.Lock()
			r.resolved[offset]++
			if acked {
				r.accepted[[2]int64{int64(partition), offset}]++
			}
			r.mu.Unlock()
			notify()
		},
		Committed: func(_ string, _ int, offset int64, err error) {
			if err != nil {
				return
			}
			r.mu.Lock()
			r.commits = append(r.commits, offset)
			r.mu.Unlock()
			notify()
		},
	}
}

func (r *recorder) commitList() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.commits)
}

// waitFor polls cond under the recorder's lock until it holds.
func (r *recorder) waitFor(t *testing.T, what string, cond func(r *recorder) bool) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		r.mu.Lock()
		ok := cond(r)
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s (commits %v)", what, r.commitList())
		}
	}
}

func (r *recorder) waitCommit(t *testing.T, offset int64) {
	t.Helper()
	r.waitFor(t, fmt.Sprintf("commit of %d", offset), func(r *recorder) bool {
		return len(r.commits) > 0 && r.commits[len(r.commits)-1] == offset
	})
}

func (r *recorder) waitResolved(t *testing.T, offsets ...int64) {
	t.Helper()
	r.waitFor(t, fmt.Sprintf("acks or nacks of %v", offsets), func(r *recorder) bool {
		for _, o := range offsets {
			if r.resolved[o] == 0 {
				return false
			}
		}
		return true
	})
}

func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("channel closed, want a message")
		}
		return m
	case <-time.After(waitFor):
		t.Fatal("no message within the wait")
	}
	return nil
}

func expectClosed(t *testing.T, ch <-chan *message.Message) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel not closed within the wait")
		}
	}
}

// source splits a message's source id: kafka:<topic>:<partition>:<offset>.
func source(t *testing.T, m *message.Message) (partition int, offset int64) {
	t.Helper()
	id := m.Metadata[headers.MetaSourceID]
	parts := strings.Split(id, ":")
	if len(parts) != 4 || parts[0] != "kafka" {
		t.Fatalf("source id %q", id)
	}
	p, err1 := strconv.Atoi(parts[2])
	o, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("source id %q", id)
	}
	return p, o
}

// receiveByOffset reads n messages of a one-partition topic, without acking them,
// indexed by offset.
func receiveByOffset(t *testing.T, ch <-chan *message.Message, n int) []*message.Message {
	t.Helper()
	msgs := make([]*message.Message, n)
	for range n {
		m := next(t, ch)
		_, off := source(t, m)
		if off >= int64(n) || msgs[off] != nil {
			t.Fatalf("unexpected offset %d", off)
		}
		msgs[off] = m
	}
	return msgs
}

// Acks of offsets 2 and 3 before 1: the committed offset stays 1 until 1 is acked,
// then jumps to 4. All five records are handed out before any ack.
func TestCommitOnlyOverContiguousAcks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "contig", 1)
	e.produce(t, "contig", 1, 5)
	rec := newRecorder()
	_, ch := e.subscribe(t, e.subCfg("g"), rec, "contig")
	msgs := receiveByOffset(t, ch, 5)

	msgs[0].Ack()
	rec.waitCommit(t, 1)
	e.waitCommitted(t, "g", "contig", 1)

	msgs[2].Ack()
	msgs[3].Ack()
	rec.waitResolved(t, 2, 3)
	if got := rec.commitList(); !slices.Equal(got, []int64{1}) {
		t.Fatalf("commits after acks of 0, 2, 3 = %v, want [1]", got)
	}
	if got := e.committed(t, "g", "contig", 1); got[0] != 1 {
		t.Fatalf("broker committed %d, want 1", got[0])
	}

	msgs[1].Ack()
	rec.waitCommit(t, 4)
	e.waitCommitted(t, "g", "contig", 4)
	msgs[4].Ack()
	rec.waitCommit(t, 5)
	if got := rec.commitList(); !slices.Equal(got, []int64{1, 4, 5}) {
		t.Fatalf("commits = %v, want [1 4 5]", got)
	}
	e.waitCommitted(t, "g", "contig", 5)
}

// A nacked record in the middle is handed out again (same UUID and metadata), and
// nothing is committed past it until it is acked.
func TestNackRedeliversAndHoldsTheCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "nack", 1)
	e.produce(t, "nack", 1, 5)
	rec := newRecorder()
	_, ch := e.subscribe(t, e.subCfg("g"), rec, "nack")
	msgs := receiveByOffset(t, ch, 5)

	msgs[1].Nack()
	for _, i := range []int{4, 3, 2, 0} {
		msgs[i].Ack()
	}
	again := next(t, ch)
	if _, off := source(t, again); off != 1 {
		t.Fatalf("redelivered offset %d, want 1", off)
	}
	if again.UUID != msgs[1].UUID || !maps.Equal(again.Metadata, msgs[1].Metadata) || !bytes.Equal(again.Payload, msgs[1].Payload) {
		t.Fatalf("redelivery %s %v differs from %s %v", again.UUID, again.Metadata, msgs[1].UUID, msgs[1].Metadata)
	}
	rec.waitResolved(t, 0, 1, 2, 3, 4)
	rec.waitCommit(t, 1)
	for _, c := range rec.commitList() {
		if c > 1 {
			t.Fatalf("committed %d past the nacked offset 1 (commits %v)", c, rec.commitList())
		}
	}
	if got := e.committed(t, "g", "nack", 1); got[0] != 1 {
		t.Fatalf("broker committed %d, want 1", got[0])
	}

	again.Ack()
	rec.waitCommit(t, 5)
	e.waitCommitted(t, "g", "nack", 5)
}

// A record nacked forever is never skipped: the commit never passes it, the records
// after it are handed out and acked (up to MaxInFlight), and the next member of the
// group starts with it.
func TestPoisonMessageIsNeverSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "poison", 1)
	e.produce(t, "poison", 1, 10)
	cfg := e.subCfg("g")
	cfg.NackResendDelay = time.Millisecond
	rec := newRecorder()
	s, ch := e.subscribe(t, cfg, rec, "poison")

	deliveries := 0
	for deliveries < 30 {
		m := next(t, ch)
		if _, off := source(t, m); off == 2 {
			deliveries++
			m.Nack()
			continue
		}
		m.Ack()
	}
	rec.waitResolved(t, 0, 1, 3, 4, 5, 6, 7, 8, 9)
	rec.waitCommit(t, 2)
	if got := rec.commitList(); slices.Max(got) != 2 {
		t.Fatalf("commits = %v, want none past 2", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, ch)
	if got := e.committed(t, "g", "poison", 1); got[0] != 2 {
		t.Fatalf("broker committed %d after Close, want 2", got[0])
	}

	_, ch2 := e.subscribe(t, cfg, nil, "poison")
	first := next(t, ch2)
	if _, off := source(t, first); off != 2 {
		t.Fatalf("next member starts at offset %d, want 2", off)
	}
	first.Ack()
}

// A second member joins while the first holds unacked messages: the first stops handing
// out, waits for acks (some come, some never do), commits what is contiguous and
// releases its partitions. Every record is eventually acked, none is skipped, and the
// committed offsets reach the end of every partition.
func TestRebalanceMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const partitions, total = 4, 200
	testkafka.CreateTopic(t, e.brokers, "rebalance", partitions)
	e.produce(t, "rebalance", partitions, total)
	cfg := e.subCfg("g")
	rec := newRecorder() // both members: the acks the adapter counted

	_, a := e.subscribe(t, cfg, rec, "rebalance")
	var held []*message.Message
	for range 40 {
		held = append(held, next(t, a))
	}

	_, b := e.subscribe(t, cfg, rec, "rebalance")
	type key struct {
		p int
		o int64
	}
	acked := map[key]int{}
	var neverAcked []key
	for i, m := range held { // half of them are acked during the rebalance, half never
		p, o := source(t, m)
		if i%2 == 0 {
			m.Ack()
			acked[key{p, o}]++
		} else {
			neverAcked = append(neverAcked, key{p, o})
		}
	}

	// Nobody reads from the first member until the second has a message: the rebalance
	// happens while the first still has records of every partition to hand out.
	first := next(t, b)
	p, o := source(t, first)
	acked[key{p, o}]++
	first.Ack()

	// Read and ack everything, redeliveries included, until the committed offsets reach
	// the end of every partition.
	per := int64(total / partitions)
	want := []int64{per, per, per, per}
	deadline := time.After(2 * waitFor)
	for check := time.Tick(100 * time.Millisecond); ; {
		var m *message.Message
		var ok bool
		select {
		case m, ok = <-a:
		case m, ok = <-b:
		case <-check:
			if len(acked) == total && slices.Equal(e.committed(t, "g", "rebalance", partitions), want) {
				for _, k := range neverAcked {
					if acked[k] == 0 {
						t.Fatalf("record %v held unacked by the first member was not handed out again", k)
					}
				}
				// Every offset below the committed one was acked in a generation that
				// owned it: nothing was committed over.
				rec.mu.Lock()
				defer rec.mu.Unlock()
				for p := range int64(partitions) {
					for o := range per {
						if rec.accepted[[2]int64{p, o}] == 0 {
							t.Fatalf("offset %d:%d committed but never acked", p, o)
						}
					}
				}
				return
			}
			continue
		case <-deadline:
			t.Fatalf("acked %d distinct records of %d; committed %v, want %v",
				len(acked), total, e.committed(t, "g", "rebalance", partitions), want)
		}
		if !ok {
			t.Fatal("a channel closed")
		}
		p, o := source(t, m)
		acked[key{p, o}]++
		m.Ack()
	}
}

// A broker restart (same ports and data) does not lose the group's committed offsets:
// the running subscriber resumes from them, hands out none of the records acked before
// the restart, and gets the records produced after it.
func TestResumeAfterBrokerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "restart", 2)
	e.produce(t, "restart", 2, 50)
	_, ch := e.subscribe(t, e.subCfg("g"), nil, "restart")
	for range 50 {
		next(t, ch).Ack()
	}
	e.waitCommitted(t, "g", "restart", 25, 25)

	e.cluster.Restart(t)

	var rs []*kgo.Record
	for i := 50; i < 100; i++ {
		rs = append(rs, &kgo.Record{Topic: "restart", Partition: int32(i % 2), Value: []byte(strconv.Itoa(i))})
	}
	e.produceRecords(t, rs...) // kgo retries while the cluster comes back
	got := map[int64]bool{}
	for len(got) < 50 {
		m := next(t, ch)
		p, o := source(t, m)
		if o < 25 {
			t.Fatalf("record %d:%d, acked and committed before the restart, handed out again", p, o)
		}
		got[int64(p)*1000+o] = true
		m.Ack()
	}
	e.waitCommitted(t, "g", "restart", 50, 50)
}

// Keys (binary, null, empty), repeated headers in order, the timestamp and the source
// id survive Kafka -> watermill -> Kafka; reserved headers from the wire are dropped
// and reserved metadata never goes on the wire.
func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "rt.in", 1)
	testkafka.CreateTopic(t, e.brokers, "rt.out", 1)
	binKey := []byte{0x00, 0xff, 'k', 0x80}
	ts := time.UnixMilli(1_700_000_000_123)
	e.produceRecords(t,
		&kgo.Record{Topic: "rt.in", Key: binKey, Value: []byte("one"), Timestamp: ts, Headers: []kgo.RecordHeader{
			{Key: "x", Value: []byte("1")},
			{Key: "X-Mixed-Case", Value: []byte("v")},
			{Key: "x", Value: []byte("2")},
			{Key: headers.MetaSourceID, Value: []byte("kafka:spoof:9:9")},
			{Key: headers.MetaReply, Value: []byte("spoofed")},
		}},
		&kgo.Record{Topic: "rt.in", Value: []byte("null key"), Headers: []kgo.RecordHeader{
			{Key: "bin", Value: []byte{0x01, 0x00, 0xfe}},
		}},
		&kgo.Record{Topic: "rt.in", Key: []byte{}, Value: []byte("empty key")},
	)
	_, ch := e.subscribe(t, e.subCfg("g"), nil, "rt.in")
	msgs := receiveByOffset(t, ch, 3)
	for _, m := range msgs {
		m.Ack()
	}

	one := msgs[0]
	list := headers.FromMetadata(one.Metadata)
	if v := list.Values("x"); !slices.Equal(v, []string{"1", "2"}) {
		t.Errorf("x = %v, want [1 2]", v)
	}
	if one.Metadata["X-Mixed-Case"] != "v" || msgs[1].Metadata["bin"] != "\x01\x00\xfe" {
		t.Errorf("metadata %q", one.Metadata)
	}
	if got := one.Metadata[headers.MetaKafkaKey]; got != string(binKey) {
		t.Errorf("key = %q, want %q", got, binKey)
	}
	if got := one.Metadata[headers.MetaSourceID]; got != "kafka:rt.in:0:0" {
		t.Errorf("source id = %q", got)
	}
	if got := one.Metadata[wmkafka.MetaKafkaTimestamp]; got != "1700000000123" {
		t.Errorf("timestamp = %q", got)
	}
	if _, ok := one.Metadata[headers.MetaReply]; ok {
		t.Errorf("reserved header taken from the wire: %q", one.Metadata)
	}
	if len(one.UUID) != 26 {
		t.Errorf("UUID %q is not a fresh ULID", one.UUID)
	}
	if string(one.Payload) != "one" {
		t.Errorf("payload %q", one.Payload)
	}
	if _, ok := msgs[1].Metadata[headers.MetaKafkaKey]; ok {
		t.Errorf("null key became metadata: %q", msgs[1].Metadata)
	}
	// An empty key is an empty key, not a null one.
	if k, ok := msgs[2].Metadata[headers.MetaKafkaKey]; !ok || k != "" {
		t.Errorf("empty key: metadata %q, want an empty key", msgs[2].Metadata)
	}
	// The publisher honours each message's context; these came from a subscription whose
	// contexts end with it, so they are republished with fresh ones.
	for _, m := range msgs {
		m.SetContext(context.Background())
	}

	pub := e.publisher(t, wmkafka.PublisherConfig{})
	if err := pub.Publish("rt.out", msgs...); err != nil {
		t.Fatal(err)
	}
	out := consume(t, e, "rt.out", 3)
	want := []kgo.RecordHeader{
		{Key: "x", Value: []byte("1")},
		{Key: "X-Mixed-Case", Value: []byte("v")},
		{Key: "x", Value: []byte("2")},
	}
	if !slices.EqualFunc(out[0].Headers, want, func(a, b kgo.RecordHeader) bool {
		return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
	}) {
		t.Errorf("headers on the wire = %q, want %q", out[0].Headers, want)
	}
	if !bytes.Equal(out[0].Key, binKey) || string(out[0].Value) != "one" {
		t.Errorf("record 0: key %q value %q", out[0].Key, out[0].Value)
	}
	if out[1].Key != nil || len(out[1].Headers) != 1 || out[1].Headers[0].Key != "bin" || !bytes.Equal(out[1].Headers[0].Value, []byte{0x01, 0x00, 0xfe}) {
		t.Errorf("record 1: key %q (want null), headers %q", out[1].Key, out[1].Headers)
	}
	if out[2].Key == nil || len(out[2].Key) != 0 {
		t.Errorf("record 2: key %v, want empty and not null", out[2].Key)
	}
}

// consume reads n records of partition 0 of topic from the start, with kgo.
func consume(t *testing.T, e *env, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d records of %s, want %d", len(out), topic, n)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// The UUID header, when configured, carries the UUID (replacing a metadata header of
// that name, matched case-insensitively) and becomes the UUID again on receipt.
func TestUUIDHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "uuid", 1)
	pub := e.publisher(t, wmkafka.PublisherConfig{UUIDHeader: "wm-uuid"})
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	msg.Metadata.Set("WM-UUID", "not-the-uuid")
	msg.Metadata.Set("other", "o")
	if err := pub.Publish("uuid", msg); err != nil {
		t.Fatal(err)
	}
	rec := consume(t, e, "uuid", 1)[0]
	if len(rec.Headers) != 2 || rec.Headers[0].Key != "other" || rec.Headers[1].Key != "wm-uuid" || string(rec.Headers[1].Value) != msg.UUID {
		t.Fatalf("headers on the wire = %q", rec.Headers)
	}
	cfg := e.subCfg("g")
	cfg.UUIDHeader = "WM-Uuid"
	_, ch := e.subscribe(t, cfg, nil, "uuid")
	got := next(t, ch)
	got.Ack()
	if got.UUID != msg.UUID {
		t.Fatalf("UUID = %q, want %q", got.UUID, msg.UUID)
	}
	if _, ok := got.Metadata["wm-uuid"]; ok || got.Metadata["other"] != "o" {
		t.Fatalf("metadata = %q", got.Metadata)
	}
}

// 500 messages in one Publish are one produce request (one partition), and all arrive.
// The linger is 100 ms here: with the default 2 ms a loaded machine (-race, CI) can take
// longer than that to hand the 500 to the client, and the batch then leaves in two.
func TestPublishBatchIsOneWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "batch", 1)
	produces := e.cluster.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "batch", Observe: true, Count: -1})
	defer produces.Remove()
	pub := e.publisher(t, wmkafka.PublisherConfig{UUIDHeader: uuidHeader, BatchTimeout: 100 * time.Millisecond})
	var msgs message.Messages
	for i := range 500 {
		msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i))))
	}
	if err := pub.Publish("batch", msgs...); err != nil {
		t.Fatal(err)
	}
	if n := produces.Hits(); n != 1 {
		t.Fatalf("%d produce requests for one Publish of 500, want 1", n)
	}
	cfg := e.subCfg("g")
	cfg.UUIDHeader = uuidHeader
	_, ch := e.subscribe(t, cfg, nil, "batch")
	got, all := readUnique(ch, len(msgs), waitFor)
	if !all {
		t.Fatalf("received %d of %d", len(got), len(msgs))
	}
	for i, m := range got { // one partition: in order
		if m.UUID != msgs[i].UUID {
			t.Fatalf("message %d is %s, want %s", i, m.UUID, msgs[i].UUID)
		}
	}
}

// A partition that refuses produce requests fails the messages bound for it, and only
// those; a message with a done context and an oversized one fail alone.
func TestPublishErrorPerMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "perr", 2)
	refuse := e.cluster.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "perr", Partitions: []int32{1},
		Err: kerr.InvalidRecord, Count: -1})
	defer refuse.Remove()

	pub := e.publisher(t, wmkafka.PublisherConfig{})
	var msgs message.Messages
	wantFailed := map[string]bool{}
	toP0 := 0
	for i := range 20 {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		key := "key-" + strconv.Itoa(i)
		m.Metadata.Set(headers.MetaKafkaKey, key)
		if kgo.StickyKeyPartitioner(nil).ForTopic("perr").Partition(&kgo.Record{Key: []byte(key)}, 2) == 1 {
			wantFailed[m.UUID] = true
		} else {
			toP0++
		}
		msgs = append(msgs, m)
	}
	if len(wantFailed) == 0 || toP0 == 0 {
		t.Fatal("keys do not cover both partitions")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dead := message.NewMessage(watermill.NewUUID(), []byte("x"))
	dead.SetContext(ctx)
	big := message.NewMessage(watermill.NewUUID(), bytes.Repeat([]byte("x"), 2<<20))
	msgs = append(msgs, dead, big)

	err := pub.Publish("perr", msgs...)
	var perr *broker.PublishError
	if !errors.As(err, &perr) {
		t.Fatalf("err = %v, want *PublishError", err)
	}
	failed := perr.FailedMessages()
	if len(failed) != len(wantFailed)+2 {
		t.Fatalf("%d failed, want %d: %v", len(failed), len(wantFailed)+2, failed)
	}
	for id := range wantFailed {
		if !errors.Is(failed[id], kerr.InvalidRecord) {
			t.Fatalf("message %s: %v, want INVALID_RECORD", id, failed[id])
		}
	}
	if !errors.Is(failed[dead.UUID], context.Canceled) {
		t.Fatalf("dead context: %v", failed[dead.UUID])
	}
	if !errors.Is(failed[big.UUID], kerr.MessageTooLarge) {
		t.Fatalf("big message: %v", failed[big.UUID])
	}
	if want := fmt.Sprintf("%d of %d", len(failed), len(msgs)); !strings.Contains(err.Error(), want) {
		t.Fatalf("Error() = %q, want %q in it", err, want)
	}
	if got := endOffsets(t, e, "perr", 2); got[0] != int64(toP0) || got[1] != 0 {
		t.Fatalf("end offsets %v, want [%d 0]", got, toP0)
	}
}

// MaxRecordBytes is the publisher's record limit: a record over it fails alone as a
// too_large rejection, one under it is written.
func TestPublisherMaxRecordBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "maxrec", 1)
	pub := e.publisher(t, wmkafka.PublisherConfig{MaxRecordBytes: 4096})
	small := message.NewMessage(watermill.NewUUID(), bytes.Repeat([]byte("s"), 3000))
	big := message.NewMessage(watermill.NewUUID(), bytes.Repeat([]byte("b"), 4096))
	err := pub.Publish("maxrec", small, big)
	var perr *broker.PublishError
	if !errors.As(err, &perr) || perr.Len() != 1 {
		t.Fatalf("err = %v, want one failed message", err)
	}
	reason, ok := broker.IsRejected(perr.FailedMessages()[big.UUID])
	if !ok || reason != contract.ReasonTooLarge {
		t.Fatalf("big record: %v, want a too_large rejection", perr.FailedMessages()[big.UUID])
	}
	if got := endOffsets(t, e, "maxrec", 1); got[0] != 1 {
		t.Fatalf("end offset %v, want the small record written", got)
	}
}

func endOffsets(t *testing.T, e *env, topic string, partitions int) []int64 {
	t.Helper()
	return testkafka.EndOffsets(t, e.brokers, topic, partitions)
}

// A call that fails as a whole (the topic does not exist and may not be created) is a
// plain error, not a PublishError.
func TestPublishToMissingTopicFailsWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := e.publisher(t, wmkafka.PublisherConfig{WriteTimeout: 2 * time.Second})
	err := pub.Publish("missing", message.NewMessage(watermill.NewUUID(), []byte("x")))
	var perr *broker.PublishError
	if err == nil || errors.As(err, &perr) {
		t.Fatalf("err = %v, want a plain error", err)
	}
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("err = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
}

func TestPublisherClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := e.publisher(t, wmkafka.PublisherConfig{})
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := pub.Publish("x", message.NewMessage(watermill.NewUUID(), nil)); !errors.Is(err, wmkafka.ErrClosed) {
		t.Fatalf("Publish after Close = %v, want ErrClosed", err)
	}
}

// The ingress topic and the cancel topic, subscribed on one Subscriber, are consumed
// by one consumer group, whose offsets cover both.
func TestTwoTopicsOneGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "delay.in", 1)
	testkafka.CreateTopic(t, e.brokers, "delay.cancel", 1)
	e.produce(t, "delay.in", 1, 2)
	e.produce(t, "delay.cancel", 1, 1)
	s := e.subscriber(t, e.subCfg("bridge"), nil)
	in, err := s.Subscribe(context.Background(), "delay.in")
	if err != nil {
		t.Fatal(err)
	}
	cancelCh, err := s.Subscribe(context.Background(), "delay.cancel")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		next(t, in).Ack()
	}
	next(t, cancelCh).Ack()
	e.waitCommitted(t, "bridge", "delay.in", 2)
	e.waitCommitted(t, "bridge", "delay.cancel", 1)
}

// A new group starts at the first offset: records produced before it ever ran are not
// skipped.
func TestNewGroupStartsAtFirstOffset(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "old", 1)
	e.produce(t, "old", 1, 3)
	for _, group := range []string{"one", "two"} {
		_, ch := e.subscribe(t, e.subCfg(group), nil, "old")
		for _, m := range receiveByOffset(t, ch, 3) {
			m.Ack()
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	brokers := []string{"127.0.0.1:1"}
	subs := map[string]wmkafka.SubscriberConfig{
		"no brokers":       {GroupID: "g"},
		"empty broker":     {Brokers: []string{""}, GroupID: "g"},
		"no group":         {Brokers: brokers},
		"negative":         {Brokers: brokers, GroupID: "g", MaxInFlight: -1},
		"bad start offset": {Brokers: brokers, GroupID: "g", StartOffset: 5},
		"heartbeat":        {Brokers: brokers, GroupID: "g", HeartbeatInterval: time.Minute},
		"drain":            {Brokers: brokers, GroupID: "g", DrainTimeout: time.Minute},
	}
	for name, cfg := range subs {
		t.Run("subscriber "+name, func(t *testing.T) {
			if _, err := wmkafka.NewSubscriber(cfg, nil); err == nil {
				t.Fatal("no error")
			}
		})
	}
	pubs := map[string]wmkafka.PublisherConfig{
		"no brokers":          {},
		"negative":            {Brokers: brokers, BatchTimeout: -1},
		"negative max record": {Brokers: brokers, MaxRecordBytes: -1},
	}
	for name, cfg := range pubs {
		t.Run("publisher "+name, func(t *testing.T) {
			if _, err := wmkafka.NewPublisher(cfg, nil); err == nil {
				t.Fatal("no error")
			}
		})
	}
	if _, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{Brokers: brokers, GroupID: "g"}, nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: brokers}, nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// Close with messages handed out: the partition waits (DrainTimeout) for their acks,
// commits the contiguous ones, leaves the group and closes the channel; a message never
// acked has its context cancelled and is handed out again to the next member. Close
// leaves no goroutine behind, is idempotent, and Subscribe fails after it.
//
// Not parallel: it counts the goroutines of the package.
func TestCloseWithMessagesInFlight(t *testing.T) {
	before := adapterGoroutines()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "inflight", 1)
	e.produce(t, "inflight", 1, 10)
	cfg := e.subCfg("g")
	s, ch := e.subscribe(t, cfg, nil, "inflight")
	held := receiveByOffset(t, ch, 3)
	held[0].Ack()

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = s.Close()
	}()
	held[1].Ack() // during the drain: counts
	<-closed
	expectClosed(t, ch)
	select {
	case <-held[2].Context().Done():
	default:
		t.Fatal("context of a message never acked not cancelled by Close")
	}
	held[2].Ack() // after Close: ignored, no panic
	if got := e.committed(t, "g", "inflight", 1); got[0] != 2 {
		t.Fatalf("committed %d after Close, want 2", got[0])
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Subscribe(context.Background(), "inflight"); !errors.Is(err, wmkafka.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
	}
	deadline := time.Now().Add(waitFor)
	for adapterGoroutines() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("adapter goroutines left after Close:\n%s", buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}

	_, ch2 := e.subscribe(t, cfg, nil, "inflight")
	first := next(t, ch2)
	if _, off := source(t, first); off != 2 {
		t.Fatalf("next member starts at %d, want 2", off)
	}
	first.Ack()
}

// adapterGoroutines counts the goroutines running code of this adapter.
func adapterGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/broker/kafka.") {
			n++
		}
	}
	return n
}

// An Ack that comes after its generation ended does not count: a rebalance (another
// topic's member joining the shared group) releases the partition with three messages
// out; the member gets the partition back and hands them out again; the late Acks of
// the first deliveries move nothing, and the commit follows only the new deliveries.
func TestLateAckFromEndedGenerationIsIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testkafka.CreateTopic(t, e.brokers, "late", 1)
	testkafka.CreateTopic(t, e.brokers, "other", 1)
	e.produce(t, "late", 1, 3)
	rec := newRecorder()
	_, ch := e.subscribe(t, e.subCfg("g"), rec, "late")
	old := receiveByOffset(t, ch, 3)

	e.subscribe(t, e.subCfg("g"), nil, "other") // rebalances group g
	again := receiveByOffset(t, ch, 3)          // after the drain (DrainTimeout) and the rejoin
	for i, m := range old {
		select {
		case <-m.Context().Done():
		default:
			t.Fatalf("context of the first delivery of offset %d not cancelled on release", i)
		}
		m.Ack() // late: ignored
	}
	again[1].Ack()
	rec.waitResolved(t, 1)
	if got := rec.commitList(); len(got) != 0 {
		t.Fatalf("commits %v after late acks of 0..2 and an ack of 1: want none", got)
	}
	again[0].Ack()
	rec.waitCommit(t, 2)
	again[2].Ack()
	rec.waitCommit(t, 3)
	e.waitCommitted(t, "g", "late", 3)
}

func TestPing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := wmkafka.Ping(ctx, append([]string{"127.0.0.1:1"}, e.brokers...)); err != nil {
		t.Fatalf("ping with one live broker: %v", err)
	}
	if err := wmkafka.Ping(ctx, []string{"127.0.0.1:1"}); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if err := wmkafka.Ping(cancelled, e.brokers); err == nil {
		t.Fatal("ping with a cancelled context succeeded")
	}
	if err := wmkafka.Ping(ctx, nil); err == nil {
		t.Fatal("ping without brokers succeeded")
	}
}
