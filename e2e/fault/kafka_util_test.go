//go:build fault

package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// kstack is a stack whose bridge reads and writes Kafka only (kfake, 3 brokers): topics
// delay.in, delay.cancel, delay.dlq and out.fault, 3 partitions each.
type kstack struct {
	*stack
	kafka   *testkafka.Cluster
	brokers []string
	cl      *kgo.Client // producer
	group   string
}

func newKafkaStack(t *testing.T) *kstack {
	t.Helper()
	s := newStack(t)
	delete(s.env, "BRIDGE_NATS_URL")
	delete(s.env, "BRIDGE_NATS_STREAM")
	k := &kstack{stack: s, kafka: testkafka.Start(t)}
	k.brokers = k.kafka.Brokers()
	for _, topic := range []string{"delay.in", "delay.cancel", "delay.dlq", "out.fault"} {
		testkafka.CreateTopic(t, k.brokers, topic, 3)
	}
	return k.join(t)
}

// join gives k a consumer group of its own and a producer, and points the bridge's
// environment at the cluster (k.brokers set, topics created).
func (k *kstack) join(t *testing.T) *kstack {
	t.Helper()
	k.group = "bridge-" + strconv.Itoa(rand.IntN(1e9))
	k.env["BRIDGE_KAFKA_BROKERS"] = strings.Join(k.brokers, ",")
	k.env["BRIDGE_KAFKA_GROUP"] = k.group
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	k.cl = cl
	return k
}

// kchecker produces numbered records to delay.in and reads out.fault and delay.dlq from
// the start, counting copies per seq, early arrivals and x-delay-ids.
type kchecker struct {
	t *testing.T
	k *kstack

	arrivals                           // mu guards the maps below too
	ids      map[string]map[string]int // seq -> x-delay-id -> copies
	dues     map[string]map[string]int // seq -> x-delay-due -> copies
	dead     map[string]string         // seq -> x-delay-error of its dead letter
}

func newKafkaChecker(t *testing.T, k *kstack) *kchecker {
	t.Helper()
	c := &kchecker{t: t, k: k, arrivals: newArrivals(),
		ids: map[string]map[string]int{}, dues: map[string]map[string]int{}, dead: map[string]string{}}
	c.read("out.fault", c.arrive)
	c.read("delay.dlq", func(r *kgo.Record, _ time.Time) {
		c.mu.Lock()
		c.dead[recHeader(r, "seq")] = recHeader(r, "x-delay-error")
		c.mu.Unlock()
	})
	return c
}

// read consumes topic from the start with its own client, in the background.
func (c *kchecker) read(topic string, f func(*kgo.Record, time.Time)) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.k.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		c.t.Fatalf("kgo consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { f(r, now) })
		}
	}()
	c.t.Cleanup(func() { cancel(); <-done; cl.Close() })
}

func recHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c *kchecker) arrive(r *kgo.Record, now time.Time) {
	seq := recHeader(r, "seq")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arrivedLocked(seq, recHeader(r, "x-delay-due"), now)
	if c.ids[seq] == nil {
		c.ids[seq] = map[string]int{}
	}
	c.ids[seq][recHeader(r, "x-delay-id")]++
	if c.dues[seq] == nil {
		c.dues[seq] = map[string]int{}
	}
	c.dues[seq][recHeader(r, "x-delay-due")]++
}

// send produces n records (x-target out.fault) to delay.in, record i with x-delay
// delay(i), spread over the partitions unless partition >= 0, and waits for every ack.
// xdelay, when not nil, overrides the x-delay header text (for bad records).
func (c *kchecker) send(prefix string, n, partition int, delay func(int) time.Duration, xdelay func(int) string) []string {
	c.t.Helper()
	return c.produce(prefix, "out.fault", n, partition, delay, xdelay)
}

// sendTarget is send with x-target target, spread over the partitions.
func (c *kchecker) sendTarget(prefix, target string, n int, delay func(int) time.Duration) []string {
	c.t.Helper()
	return c.produce(prefix, target, n, -1, delay, nil)
}

func (c *kchecker) produce(prefix, target string, n, partition int, delay func(int) time.Duration, xdelay func(int) string) []string {
	c.t.Helper()
	seqs := make([]string, n)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	for i := range n {
		seq := fmt.Sprintf("%s-%d", prefix, i)
		seqs[i] = seq
		d := delay(i)
		hd := strconv.FormatInt(d.Milliseconds(), 10)
		if xdelay != nil {
			hd = xdelay(i)
		}
		p := int32(i % 3)
		if partition >= 0 {
			p = int32(partition)
		}
		r := &kgo.Record{Topic: "delay.in", Partition: p, Value: []byte(seq), Headers: []kgo.RecordHeader{
			{Key: "x-delay", Value: []byte(hd)}, {Key: "x-target", Value: []byte(target)}, {Key: "seq", Value: []byte(seq)}}}
		c.expect(seq, d)
		wg.Add(1)
		c.k.cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				errMu.Lock()
				firstErr = err
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		c.t.Fatalf("produce: %v", firstErr)
	}
	return seqs
}

// kreport is what the Kafka checker counted for one run. reparked counts the duplicate
// records with an x-delay-due of their own: copies of a message that was parked again
// (every park counts the relative delay again), as opposed to the same parked entry
// published again (after a lease or a failed write: same x-delay-due), which a Kafka target
// keeps since kafka-go has no idempotent producer.
type kreport struct {
	messages, lost, early, dups, reparked, idsPerSeq int
	p99, max                                         time.Duration
}

func (r kreport) String() string {
	return fmt.Sprintf("messages %d, lost %d, early %d, duplicate records %d (%d from a second park, %d republished entries; most distinct x-delay-ids for one message %d), lateness p99 %s max %s",
		r.messages, r.lost, r.early, r.dups, r.reparked, r.dups-r.reparked, r.idsPerSeq, r.p99, r.max)
}

// await waits up to timeout for every seq on out.fault, then 1 s more, and counts.
func (c *kchecker) await(seqs []string, timeout time.Duration) kreport {
	c.t.Helper()
	c.waitAll(seqs, timeout)
	time.Sleep(time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := kreport{messages: len(seqs), early: len(c.early)}
	r.lost, r.dups = c.lostDupsLocked(seqs)
	for _, s := range seqs {
		r.idsPerSeq = max(r.idsPerSeq, len(c.ids[s]))
		if n := len(c.dues[s]); n > 1 {
			r.reparked += n - 1
		}
	}
	if l := c.sortedLatenessLocked(); len(l) > 0 {
		r.p99, r.max = l[min(len(l)-1, len(l)*99/100)], l[len(l)-1]
	}
	c.reportEarlyLocked(c.t)
	return r
}

// awaitDead waits up to timeout until every seq was dead-lettered and returns the
// count by reason (x-delay-error up to the first ':').
func (c *kchecker) awaitDead(seqs []string, timeout time.Duration) (got int, reasons map[string]int) {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		got = 0
		reasons = map[string]int{}
		for _, s := range seqs {
			if e, ok := c.dead[s]; ok {
				got++
				reason, _, _ := strings.Cut(e, ":")
				reasons[reason]++
			}
		}
		c.mu.Unlock()
		if got == len(seqs) || time.Now().After(deadline) {
			return got, reasons
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireKafkaSafe fails the test unless nothing was lost and nothing was early.
func requireKafkaSafe(t *testing.T, r kreport) {
	t.Helper()
	t.Log(r)
	if r.lost != 0 || r.early != 0 {
		t.Fatalf("guarantee broken: %s", r)
	}
}

// committed returns the group's committed offset of every partition of topic.
func (k *kstack) committed(t *testing.T, topic string) map[int]int64 {
	t.Helper()
	out := map[int]int64{}
	for p, o := range testkafka.Committed(t, k.brokers, k.group, topic, 3) {
		out[p] = o
	}
	return out
}

// inCounts sums delaybridge_messages_in_total by result over the bridges' /metrics.
func inCounts(t *testing.T, bridges ...*e2etest.Bridge) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, b := range bridges {
		code, body := e2etest.HTTPGet("http://" + b.HTTPAddr + "/metrics")
		if code != 200 {
			continue // a killed bridge
		}
		for _, line := range strings.Split(body, "\n") {
			if !strings.HasPrefix(line, "delaybridge_messages_in_total{") {
				continue
			}
			i := strings.Index(line, `result="`)
			j := strings.LastIndexByte(line, ' ')
			if i < 0 || j < 0 {
				continue
			}
			result, _, _ := strings.Cut(line[i+len(`result="`):], `"`)
			v, err := strconv.ParseFloat(line[j+1:], 64)
			if err == nil {
				out[result] += int(v)
			}
		}
	}
	return out
}

// produceErrors answers a produce request with code for every partition of the topics
// for which code(topic) is non-zero; other requests are handled by the cluster.
func produceErrors(kreq kmsg.Request, code func(topic string) int16) (kmsg.Response, bool) {
	req, ok := kreq.(*kmsg.ProduceRequest)
	if !ok {
		return nil, false
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	hit := false
	for _, rt := range req.Topics {
		c := code(rt.Topic)
		hit = hit || c != 0
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, c
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, hit
}

// testkafkaCreate creates topic (3 partitions) on k's cluster.
func testkafkaCreate(t *testing.T, k *kstack, topic string) {
	t.Helper()
	testkafka.CreateTopic(t, k.brokers, topic, 3)
}

// waitAssigned waits until b's member for topic has been given partitions in a
// generation of the group. When b joined a group that another bridge already had, the
// group is then stable with both: every member rejoined and synced. A test that kills a
// member waits for this first, so the kill does not fall into the join: a member that
// dies during a rebalance holds the group for up to its rebalance timeout (30 s), and
// the joins that time out meanwhile add more members to wait for.
func waitAssigned(t *testing.T, b *e2etest.Bridge, topic string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(b.Out.String(), "\n") {
			if strings.Contains(line, `msg="kafka consumer group generation"`) &&
				strings.Contains(line, " topic="+topic+" ") && !strings.Contains(line, `partitions="[]"`) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no partition of %s was assigned to the bridge in 60 s:\n%s", topic, b.Out.String())
}
