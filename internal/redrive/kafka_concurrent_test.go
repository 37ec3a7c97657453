package redrive

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// kletterSpec is a kind of dead letter: n of them, with x-delay-id prefix-i, x-target
// and x-delay-error.
type kletterSpec struct {
	prefix, target, errText string
	n                       int
}

// kletters produces the letters of specs to delay.dlq, interleaved (one of each kind in
// turn while any is left) and spread over 4 partitions in turn (cl partitions manually).
func kletters(t *testing.T, cl *kgo.Client, specs ...kletterSpec) {
	t.Helper()
	var recs []*kgo.Record
	for i := 0; ; i++ {
		more := false
		for _, sp := range specs {
			if i >= sp.n {
				continue
			}
			more = true
			id := fmt.Sprintf("%s-%d", sp.prefix, i)
			recs = append(recs, &kgo.Record{Topic: "delay.dlq", Partition: int32(len(recs) % 4), Value: []byte(id),
				Headers: []kgo.RecordHeader{{Key: "x-target", Value: []byte(sp.target)}, {Key: "x-delay-id", Value: []byte(id)},
					{Key: "x-delay-due", Value: []byte("5")}, {Key: "x-delay-error", Value: []byte(sp.errText)}}})
		}
		if !more {
			break
		}
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// dlqEnd is the sum of the end offsets of delay.dlq's 4 partitions.
func dlqEnd(t *testing.T, brokers []string) int64 {
	t.Helper()
	var sum int64
	for _, o := range testkafka.EndOffsets(t, brokers, "delay.dlq", 4) {
		sum += o
	}
	return sum
}

// refuseAgain plays the bridge: every record on delay.in for target is dead-lettered
// anew (its headers kept, x-delay-redrive among them), until the test ends.
func refuseAgain(t *testing.T, brokers []string, target, errText string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("delay.in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done; cl.Close() })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				if v, _ := recordHeader(r, "x-target"); v == target {
					dead := &kgo.Record{Topic: "delay.dlq", Value: r.Value, Headers: append(r.Headers,
						kgo.RecordHeader{Key: "x-delay-error", Value: []byte(errText)})}
					_ = cl.ProduceSync(ctx, dead).FirstErr()
				}
			})
		}
	}()
}

// Issue 24, item 3 (fault row R3): two `bridge redrive` runs at once on Kafka, over 1,000
// target_not_allowed letters (fixed since), 500 invalid_delay ones that the bridge
// refuses again and 50 forbidden ones not selected. Between them the runs send each
// letter once (1,500 records on the ingress topic, one per x-delay-id), both end without
// an error, and their counts add up: 1,000 REDRIVEN, 500 REFUSED AGAIN, 50 LEFT. The 500
// new letters are there for a later run (a dry run counts them), not sent again by these.
//
// Staggered: the second run starts once the first one's refused letters are in the topic
// (past the first run's end offsets, before the second's): runs in the group at the same
// time stop at the earliest run's end offsets, so it does not send them again.
func TestKafkaConcurrentRuns(t *testing.T) {
	t.Run("together", func(t *testing.T) { concurrentRuns(t, false) })
	t.Run("staggered", func(t *testing.T) { concurrentRuns(t, true) })
}

func concurrentRuns(t *testing.T, staggered bool) {
	k := testkafka.Start(t)
	brokers := k.Brokers()
	testkafka.CreateTopic(t, brokers, "delay.dlq", 4)
	testkafka.CreateTopic(t, brokers, "delay.in", 4)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	kletters(t, cl, kletterSpec{"ok", "out.ok", "target_not_allowed: out.ok", 1000},
		kletterSpec{"bad", "still.bad", "invalid_delay: soon", 500}, kletterSpec{"left", "out.left", "forbidden: out.left", 50})
	end := dlqEnd(t, brokers)
	refuseAgain(t, brokers, "still.bad", "invalid_delay: soon")

	cfg := KafkaConfig{Brokers: brokers, DLQTopic: "delay.dlq", Ingress: "delay.in", Group: "bridge-redrive"}
	opts := Options{Reasons: []string{"target_not_allowed", "invalid_delay"}, Wait: 3 * time.Second}
	var wg sync.WaitGroup
	counts := make([]Counts, 2)
	errs := make([]error, 2)
	for i := range 2 {
		if i == 1 && staggered {
			for deadline := time.Now().Add(30 * time.Second); dlqEnd(t, brokers) < end+20; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no letter refused again within 30s")
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], errs[i] = Kafka(t.Context(), cfg, opts)
		}()
	}
	wg.Wait()
	sum := map[string]Tally{}
	for i := range 2 {
		if errs[i] != nil {
			t.Errorf("run %d: %v", i, errs[i])
		}
		for r, c := range counts[i] {
			s := sum[r]
			s.Redriven += c.Redriven
			s.Refused += c.Refused
			s.Left += c.Left
			s.Other += c.Other
			s.Selected += c.Selected
			sum[r] = s
		}
		t.Logf("run %d: %s", i, fmtCounts(counts[i]))
	}
	sent := map[string]int{}
	for _, r := range ingressRecords(t, brokers) {
		id, _ := recordHeader(r, "x-delay-id")
		sent[id]++
	}
	twice := 0
	for _, n := range sent {
		if n > 1 {
			twice++
		}
	}
	t.Logf("ingress: %d ids, %d sent more than once", len(sent), twice)
	if len(sent) != 1500 || twice != 0 {
		t.Errorf("ingress holds %d distinct letters (want 1500), %d of them more than once (want 0)", len(sent), twice)
	}
	want := map[string]Tally{"target_not_allowed": {Redriven: 1000, Selected: 1000},
		"invalid_delay": {Refused: 500, Selected: 500}, "forbidden": {Left: 50}}
	for r, w := range want {
		if sum[r] != w {
			t.Errorf("%s: the runs counted %+v between them, want %+v", r, sum[r], w)
		}
	}
	dry, err := Kafka(t.Context(), cfg, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "a later dry run", dry, map[string]Tally{"invalid_delay": {Selected: 500}})
}

// fmtCounts is counts on one line, by reason.
func fmtCounts(c Counts) string {
	s := ""
	for r, t := range c {
		s += fmt.Sprintf("%s=%+v ", r, *t)
	}
	return s
}

// --from-start resets the group's offsets outside any generation, which the coordinator
// refuses while another run is in the group: the run stops with an error at once (no
// letter sent); with the group empty again it reads every letter.
func TestKafkaFromStartRefusedWhileARunHolds(t *testing.T) {
	k := testkafka.Start(t)
	brokers := k.Brokers()
	testkafka.CreateTopic(t, brokers, "delay.dlq", 4)
	testkafka.CreateTopic(t, brokers, "delay.in", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	kletters(t, cl, kletterSpec{"ok", "out.ok", "publish_failed: 10 attempts", 8})
	joined := make(chan struct{})
	cg, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("bridge-redrive"), kgo.ConsumeTopics("delay.dlq"),
		kgo.Balancers(boundsBalancer{GroupBalancer: kgo.RangeBalancer(), bounds: []byte("{}")}),
		kgo.HeartbeatInterval(groupHeartbeat), kgo.SessionTimeout(groupSession), kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case <-joined:
			default:
				close(joined)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = cg.PollFetches(t.Context()) }() // polling joins the group
	select {
	case <-joined:
	case <-time.After(15 * time.Second):
		t.Fatal("the holding member did not join")
	}
	cfg := KafkaConfig{Brokers: brokers, DLQTopic: "delay.dlq", Ingress: "delay.in", Group: "bridge-redrive", FromStart: true}
	counts, err := Kafka(t.Context(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "--from-start") {
		t.Fatalf("from start while a run holds the group: %v, want the reset refused", err)
	}
	checkCounts(t, "refused reset", counts, map[string]Tally{})
	if recs := ingressRecords(t, brokers); len(recs) != 0 {
		t.Fatalf("%d letters sent", len(recs))
	}
	cg.Close()
	counts, err = Kafka(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "with the group empty", counts, map[string]Tally{"publish_failed": {Redriven: 8, Selected: 8}})
}
