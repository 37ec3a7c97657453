//go:build fault

package fault

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// k2Ids is how many ids each K2 run produces a record and then at once a cancel for,
// k2After how many of them get one more record published after their cancel, and
// k2Backlog how many invalid messages (dead-lettered) wait ahead of the records on the
// ingress topic or subject when the bridge starts: the bridge reads the cancels while it
// works through them, so every cancel is read before its record (a lagging partition),
// and finds nothing.
const (
	k2Ids     = 200
	k2After   = 20
	k2Backlog = 2000
	k2Delay   = 3 * time.Second
)

// TestK2CancelRaceKafka is row K2 on Kafka (issue 24 item 2): for 200 ids a record
// (x-delay 3000, x-delay-id) and at once its cancel, from two producers side by side, on
// other partitions of delay.in and delay.cancel, behind a backlog of 2,000 invalid records
// on delay.in, so that the cancels are read first and find nothing. Every cancel applies
// to the record produced before it (by record timestamp): 0 of the 200 delivered. A record
// of 20 of those ids produced after their cancel (20 ms later) is delivered, once, not
// early.
func TestK2CancelRaceKafka(t *testing.T) {
	k := newKafkaStack(t)
	c := newKafkaChecker(t, k)
	backlog := c.send("k2-backlog", k2Backlog, -1, func(int) time.Duration { return 0 }, func(int) string { return "abc" })
	cancels, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cancels.Close()

	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	produce := func(cl *kgo.Client, r *kgo.Record) {
		wg.Add(1)
		cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				errMu.Lock()
				firstErr = err
				errMu.Unlock()
			}
		})
	}
	record := func(id, seq string, p int32) *kgo.Record {
		c.mu.Lock()
		c.earliest[seq] = time.Now().Add(k2Delay)
		c.mu.Unlock()
		return &kgo.Record{Topic: "delay.in", Partition: p, Value: []byte(seq), Headers: []kgo.RecordHeader{
			{Key: "x-delay", Value: []byte("3000")}, {Key: "x-delay-id", Value: []byte(id)},
			{Key: "x-target", Value: []byte("out.fault")}, {Key: "seq", Value: []byte(seq)}}}
	}
	cancelled := make([]string, k2Ids)
	for i := range k2Ids {
		id := fmt.Sprintf("k2-%d", i)
		cancelled[i] = id + "-before"
		produce(k.cl, record(id, cancelled[i], int32(i%3)))
		produce(cancels, &kgo.Record{Topic: "delay.cancel", Partition: int32((i + 1) % 3), Value: []byte("cancel"),
			Headers: []kgo.RecordHeader{{Key: "x-delay-id", Value: []byte(id)}}})
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond) // the records below are published after the cancels
	after := make([]string, k2After)
	for i := range k2After {
		after[i] = fmt.Sprintf("k2-%d-after", i)
		produce(k.cl, record(fmt.Sprintf("k2-%d", i), after[i], int32((i+2)%3)))
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("produce: %v", firstErr)
	}
	b := e2etest.StartReady(t, bridgeBin, k.envWith())

	r := c.await(after, 60*time.Second)
	requireKafkaSafe(t, r)
	time.Sleep(time.Second) // the cancelled records were due with the first of those
	c.mu.Lock()
	delivered := 0
	for _, s := range cancelled {
		delivered += min(c.copies[s], 1)
	}
	c.mu.Unlock()
	in := inCounts(t, b)
	t.Logf("K2 Kafka: %d of %d cancelled records delivered; cancels: %d found, %d not found (remembered); %d records cancelled on arrival; records after their cancel: %s",
		delivered, k2Ids, in["cancelled"], in["cancel_not_found"], in["cancelled_on_arrival"], r)
	if delivered != 0 {
		t.Fatalf("%d of %d records produced before their cancel were delivered", delivered, k2Ids)
	}
	if r.dups != 0 {
		t.Fatalf("records after their cancel delivered more than once: %s", r)
	}
	if in["cancelled"]+in["cancel_not_found"] != k2Ids {
		t.Fatalf("cancels counted %d found + %d not found, want %d in all", in["cancelled"], in["cancel_not_found"], k2Ids)
	}
	if got, _ := c.awaitDead(backlog, 10*time.Second); got != len(backlog) {
		t.Fatalf("%d of %d backlog records dead-lettered", got, len(backlog))
	}
	waitEmpty(t, b)
}

// TestK2CancelRaceNATS is row K2 on NATS JetStream: the IN stream captures delay.in and
// delay.cancel, read by two consumers (delaybridge, delaybridge-cancel), which race the
// same way. 200 ids, a message and at once its cancel, from one connection (so that the
// stream stores the message first: a JetStream message's time is the server's, and two
// connections' publishes may be stored in either order), behind 2,000 invalid messages:
// 0 delivered; a message of 20 of those ids published after the cancel is delivered.
func TestK2CancelRaceNATS(t *testing.T) {
	s := newStack(t)
	c := newChecker(t, s)
	for i := range k2Backlog {
		m := nats.NewMsg("delay.in")
		m.Header.Set("x-delay", "abc")
		m.Header.Set("x-target", "out.fault")
		m.Header.Set("seq", fmt.Sprintf("k2-backlog-%d", i))
		if _, err := c.js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(js jetstream.JetStream, subject, id, seq string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Header.Set("x-delay-id", id)
		if seq != "" {
			m.Header.Set("x-delay", "3000")
			m.Header.Set("x-target", "out.fault")
			m.Header.Set("seq", seq)
			c.mu.Lock()
			c.earliest[seq] = time.Now().Add(k2Delay)
			c.mu.Unlock()
		}
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatalf("publish %s %s: %v", subject, id, err)
		}
	}
	acked := func(js jetstream.JetStream) {
		t.Helper()
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			t.Fatal("PubAcks did not arrive")
		}
	}
	cancelled := make([]string, k2Ids)
	for i := range k2Ids {
		id := fmt.Sprintf("k2-%d", i)
		cancelled[i] = id + "-before"
		publish(c.js, "delay.in", id, cancelled[i])
		publish(c.js, "delay.cancel", id, "")
	}
	acked(c.js)
	time.Sleep(20 * time.Millisecond)
	after := make([]string, k2After)
	for i := range k2After {
		after[i] = fmt.Sprintf("k2-%d-after", i)
		publish(c.js, "delay.in", fmt.Sprintf("k2-%d", i), after[i])
	}
	acked(c.js)
	b := e2etest.StartReady(t, bridgeBin, s.envWith())

	deadline := time.Now().Add(60 * time.Second)
	for {
		c.mu.Lock()
		got := 0
		for _, s := range after {
			got += min(c.copies[s], 1)
		}
		c.mu.Unlock()
		if got == len(after) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	c.mu.Lock()
	delivered, lost, dups := 0, 0, 0
	for _, s := range cancelled {
		delivered += min(c.copies[s], 1)
	}
	for _, s := range after {
		switch n := c.copies[s]; {
		case n == 0:
			lost++
		case n > 1:
			dups += n - 1
		}
	}
	early := len(c.early)
	c.mu.Unlock()
	in := inCounts(t, b)
	t.Logf("K2 NATS: %d of %d cancelled messages delivered; cancels: %d found, %d not found (remembered); %d messages cancelled on arrival; messages after their cancel: %d, lost %d, duplicates %d, early %d",
		delivered, k2Ids, in["cancelled"], in["cancel_not_found"], in["cancelled_on_arrival"], len(after), lost, dups, early)
	if delivered != 0 {
		t.Fatalf("%d of %d messages published before their cancel were delivered", delivered, k2Ids)
	}
	if lost != 0 || early != 0 || dups != 0 {
		t.Fatalf("messages published after their cancel: lost %d, early %d, duplicates %d", lost, early, dups)
	}
	if in["cancelled"]+in["cancel_not_found"] != k2Ids {
		t.Fatalf("cancels counted %d found + %d not found, want %d in all", in["cancelled"], in["cancel_not_found"], k2Ids)
	}
	waitEmpty(t, b)
}
