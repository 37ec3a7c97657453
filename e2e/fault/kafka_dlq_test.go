//go:build fault

package fault

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// dlqPartitions is how many partitions delay.in has in the K3 rows.
const dlqPartitions = 4

// newDLQStack is a Kafka stack whose delay.in has dlqPartitions partitions (the other
// topics 3); with strict, the cluster never creates topics and delay.dlq is not created.
func newDLQStack(t *testing.T, strict bool) *kstack {
	t.Helper()
	s := newStack(t)
	delete(s.env, "BRIDGE_NATS_URL")
	delete(s.env, "BRIDGE_NATS_STREAM")
	k := &kstack{stack: s}
	topics := []string{"delay.cancel", "out.fault"}
	if strict {
		k.kafka = testkafka.StartStrict(t)
	} else {
		k.kafka = testkafka.Start(t)
		topics = append(topics, "delay.dlq")
	}
	k.brokers = k.kafka.Brokers()
	testkafka.CreateTopic(t, k.brokers, "delay.in", dlqPartitions)
	for _, topic := range topics {
		testkafka.CreateTopic(t, k.brokers, topic, 3)
	}
	return k.join(t)
}

// committedOffsets returns the group's committed offset of each partition of delay.in
// (-1: none).
func committedOffsets(t *testing.T, k *kstack) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = k.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = "delay.in"
	for p := range int32(dlqPartitions) {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = k.group
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic, gt.Partitions = rt.Topic, rt.Partitions
	g.Topics = append(g.Topics, gt)
	req.Groups = append(req.Groups, g)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	out := map[int32]int64{}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	for _, gr := range resp.Groups {
		for _, tp := range gr.Topics {
			for _, p := range tp.Partitions {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}

// k3Run is what one K3 run saw.
type k3Run struct {
	sent          map[int32]int           // valid records sent per partition
	p99           map[int32]time.Duration // delivery lateness p99 per partition while the DLQ failed
	deliveredLate int                     // valid records not delivered while the DLQ failed
	committed     map[int32]int64         // committed offsets while the DLQ failed
}

// runK3 runs a K3 row on k (a bridge already started): one record with x-delay "abc" at
// offset 0 of partition 0, then valid records (x-delay 500 ms) on every partition at 100
// records/s for 6 s, while the dead-letter topic cannot be written. It waits for every
// valid record on out.fault, reads the committed offsets, then calls recover and checks
// that the bad record is dead-lettered once (invalid_delay) and that partition 0's
// commit point passes it.
func runK3(t *testing.T, k *kstack, c *kchecker, recover func()) k3Run {
	t.Helper()
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	deadCopies := map[string]int{}
	c.read("out.fault", func(r *kgo.Record, now time.Time) {
		mu.Lock()
		if _, ok := arrived[recHeader(r, "seq")]; !ok {
			arrived[recHeader(r, "seq")] = now
		}
		mu.Unlock()
	})
	c.read("delay.dlq", func(r *kgo.Record, _ time.Time) {
		mu.Lock()
		deadCopies[recHeader(r, "seq")]++
		mu.Unlock()
	})
	produce := func(seq string, p int32, xdelay string, d time.Duration) {
		c.expect(seq, d)
		k.produceSync(t, &kgo.Record{Topic: "delay.in", Partition: p, Value: []byte(seq), Headers: []kgo.RecordHeader{
			{Key: "x-delay", Value: []byte(xdelay)}, {Key: "x-target", Value: []byte("out.fault")}, {Key: "seq", Value: []byte(seq)}}})
	}
	produce("k2-bad", 0, "abc", 0)
	run := k3Run{sent: map[int32]int{}, p99: map[int32]time.Duration{}}
	type sent struct {
		p  int32
		at time.Time
	}
	valid := map[string]sent{}
	var seqs []string
	const delay = 500 * time.Millisecond
	tick := time.NewTicker(100 * time.Millisecond)
	for i := 0; i < 600; {
		<-tick.C
		for range 10 {
			p := int32(i % dlqPartitions)
			seq := fmt.Sprintf("k2-%d", i)
			valid[seq] = sent{p, time.Now()}
			produce(seq, p, strconv.Itoa(int(delay.Milliseconds())), delay)
			run.sent[p]++
			seqs = append(seqs, seq)
			i++
		}
	}
	tick.Stop()
	c.waitAll(seqs, 30*time.Second)
	run.committed = committedOffsets(t, k)
	mu.Lock()
	late := map[int32][]time.Duration{}
	for seq, s := range valid {
		at, ok := arrived[seq]
		if !ok {
			run.deliveredLate++
			continue
		}
		late[s.p] = append(late[s.p], at.Sub(s.at.Add(delay)))
	}
	badDead := deadCopies["k2-bad"]
	mu.Unlock()
	for p, l := range late {
		slices.Sort(l)
		run.p99[p] = l[min(len(l)-1, len(l)*99/100)]
	}
	t.Logf("K3 while the dead-letter topic fails: sent %v, not delivered %d, lateness p99 per partition %v, committed %v, bad record dead-lettered %d times",
		run.sent, run.deliveredLate, run.p99, run.committed, badDead)
	if run.deliveredLate != 0 {
		t.Errorf("%d of %d valid records not delivered while the dead-letter topic failed: the bad record held them", run.deliveredLate, len(seqs))
	}
	if off := run.committed[0]; off > 0 {
		t.Errorf("partition 0 committed at %d while its record at offset 0 was not dead-lettered", off)
	}
	for p := int32(1); p < dlqPartitions; p++ {
		if run.committed[p] != int64(run.sent[p]) {
			t.Errorf("partition %d committed at %d, want %d: only partition 0 may wait", p, run.committed[p], run.sent[p])
		}
	}
	if badDead != 0 {
		t.Fatalf("the bad record was dead-lettered while the dead-letter topic failed")
	}

	recovered := time.Now()
	recover()
	got, reasons := c.awaitDead([]string{"k2-bad"}, 60*time.Second)
	deadAfter := time.Since(recovered)
	var offs map[int32]int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		offs = committedOffsets(t, k)
		if offs[0] == int64(run.sent[0]+1) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // a second copy of the dead letter would come now
	mu.Lock()
	badDead = deadCopies["k2-bad"]
	mu.Unlock()
	r := c.await(seqs, 10*time.Second)
	t.Logf("K3 after the dead-letter topic recovered: bad record dead-lettered %d time(s) %v %s after; committed %v; valid %s",
		badDead, reasons, deadAfter.Round(time.Millisecond), offs, r)
	requireKafkaSafe(t, r)
	if got != 1 || reasons["invalid_delay"] != 1 || badDead != 1 {
		t.Fatalf("bad record dead-lettered %d times (%v), want once as invalid_delay", badDead, reasons)
	}
	if offs[0] != int64(run.sent[0]+1) {
		t.Fatalf("partition 0 committed at %d after the dead letter, want %d", offs[0], run.sent[0]+1)
	}
	return run
}

// K3 (issue 38 item 3): every produce to delay.dlq fails (kfake answers
// UNKNOWN_SERVER_ERROR) while a record with x-delay "abc" sits at the head of partition 0
// of 4 (one bridge holds them all) and valid records arrive on every partition at 100/s.
// Only the bad record waits: every valid record, of partition 0 too, is parked and
// delivered while the dead-letter topic fails; nothing of partition 0 is committed past
// the bad record, the other partitions are committed to their end. Once produces to
// delay.dlq succeed again the bad record is dead-lettered once and partition 0 committed
// past it. The lateness per partition is reported, not asserted.
func TestK3KafkaDeadLetterTopicFailing(t *testing.T) {
	k := newDLQStack(t, false)
	c := newKafkaChecker(t, k)
	// kfake's own fault: delay.dlq's partitions answer UNKNOWN_SERVER_ERROR, the other
	// topics of the same produce request are written (a producer puts every topic led by
	// one broker in one request).
	refuse := k.kafka.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "delay.dlq", Count: -1})
	defer refuse.Remove()
	e2etest.StartReady(t, bridgeBin, k.envWith())
	runK3(t, k, c, func() {
		t.Logf("K3: %d produce requests to delay.dlq refused", refuse.Hits())
		if refuse.Hits() == 0 {
			t.Fatal("no produce to delay.dlq was refused: the fault did not happen")
		}
		refuse.Remove()
	})
}

// K3 (missing): as TestK3KafkaDeadLetterTopicFailing, but delay.dlq does not exist (the
// cluster creates no topics): the start names it in a warning; once it is created the
// bad record is dead-lettered once.
func TestK3KafkaDeadLetterTopicMissing(t *testing.T) {
	k := newDLQStack(t, true)
	c := newKafkaChecker(t, k)
	b := e2etest.StartReady(t, bridgeBin, k.envWith())
	var warning string
	for _, line := range strings.Split(b.Out.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "BRIDGE_DLQ_SUBJECT") && strings.Contains(line, "delay.dlq") {
			warning = line
		}
	}
	t.Logf("K3 (missing): warning at start: %s", warning)
	if warning == "" {
		t.Fatalf("no warning at start names the missing dead-letter topic delay.dlq:\n%s", b.Out.String())
	}
	runK3(t, k, c, func() { testkafka.CreateTopic(t, k.brokers, "delay.dlq", 3) })
}
