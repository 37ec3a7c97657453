//go:build fault

package fault

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/failpoint"
)

// C9: 50 records with a bad x-delay at the head of partition 0, then 1000 good records.
// The bad ones go to the delay.dlq topic (invalid_delay) and are committed past; the
// partition never stalls: lost 0, early 0, and the group's committed offsets cover all
// 1050 records.
func TestC9PoisonRecordAtPartitionHead(t *testing.T) {
	k := newKafkaStack(t)
	c := newKafkaChecker(t, k)
	bad := c.send("c9-bad", 50, 0, func(int) time.Duration { return 0 }, func(int) string { return "abc" })
	good := c.send("c9", 1000, -1, uniform(time.Second), nil)
	b := e2etest.StartReady(t, bridgeBin, k.envWith())
	r := c.await(good, 30*time.Second)
	requireKafkaSafe(t, r)
	got, reasons := c.awaitDead(bad, 10*time.Second)
	var sum int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		sum = 0
		for _, off := range k.committed(t, "delay.in") {
			sum += off
		}
		if sum >= 1050 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("C9: %d/%d poison records dead-lettered %v; good %s; committed offsets sum %d", got, len(bad), reasons, r, sum)
	if got != len(bad) || reasons["invalid_delay"] != len(bad) {
		t.Fatalf("poison records not dead-lettered as invalid_delay: %d/%d %v", got, len(bad), reasons)
	}
	if sum != 1050 {
		t.Fatalf("committed offsets sum to %d, want 1050", sum)
	}
	waitEmpty(t, b)
}

// C6: a second bridge joins the group while records flow to the first (rounds of 300
// over 3 partitions): the partitions are reassigned mid-batch. Revoked partitions are
// not committed by their old owner; the new owner re-reads from the last commit and
// re-parks the same topic/partition/offset ids in place. lost 0, early 0, no message
// under two ids, and the store ends empty (no second parked entry of any record).
func TestC6KafkaRebalanceMidBatch(t *testing.T) {
	k := newKafkaStack(t)
	c := newKafkaChecker(t, k)
	a := e2etest.StartReady(t, bridgeBin, k.envWith())
	var seqs []string
	var b *e2etest.Bridge
	// Three rounds to the first bridge alone; then the second joins, and rounds go on until
	// it has parked records (the group rebalanced while records flowed: how long that takes
	// depends on the machine's load), and three more after that.
	after := -1
	for round := 0; after < 3; round++ {
		if round == 3 {
			b = e2etest.Start(t, bridgeBin, k.envWith()) // joins while records flow
		}
		if round > 60 {
			t.Fatal("the second bridge never got a partition in 60 rounds: no rebalance happened")
		}
		seqs = append(seqs, c.send("c6-"+itoa(round), 300, -1, uniform(2*time.Second), nil)...)
		time.Sleep(100 * time.Millisecond)
		if after >= 0 || (b != nil && inCounts(t, b)["parked"] > 0) {
			after++
		}
	}
	r := c.await(seqs, 60*time.Second)
	requireKafkaSafe(t, r)
	waitEmpty(t, b)
	inA, inB := inCounts(t, a), inCounts(t, b)
	t.Logf("C6: second bridge joined mid-stream: %s; parked by the first %d, by the second %d (%d re-read)",
		r, inA["parked"], inB["parked"], inA["parked"]+inB["parked"]-len(seqs))
	if inB["parked"] == 0 {
		t.Fatal("the second bridge never got a partition: no rebalance happened")
	}
	if r.idsPerSeq > 1 {
		t.Fatalf("a record was parked under %d ids", r.idsPerSeq)
	}
}

// A2: kill -9 of a bridge after it parked a batch of Kafka records and before their
// offsets were committed. The second bridge of the group takes the partitions over after
// the session timeout, re-reads from the last commit and re-parks the same ids, or, for
// records delivered meanwhile, is stopped by their tombstones: lost 0, early 0, no message
// under two ids, no record parked twice (0 duplicates with an x-delay-due of their own),
// store empty at the end. Duplicates of one parked entry (the dead bridge's claims
// published again after the lease; kafka-go has no idempotent producer) are counted.
func TestA2CrashAfterParkKafka(t *testing.T) {
	k := newKafkaStack(t)
	c := newKafkaChecker(t, k)
	a := e2etest.StartReady(t, bridgeBin, k.envWith(failpoint.Env, failpoint.AfterPark+"=crash@3"))
	b := e2etest.StartReady(t, bridgeBin, k.envWith())
	// The kill falls after the joins, not into them: both of b's members (one per
	// topic, one group) have partitions. Four members share the group, so a rebalance
	// with a dead member ends only at kfake's rebalance timeout (BRIDGE default 30 s)
	// and churn may start another: the survivor may take over late (CI once saw more
	// than 60 s under load), never lose anything.
	waitAssigned(t, b, "delay.in")
	waitAssigned(t, b, "delay.cancel")
	seqs := c.send("a2", 2000, -1, uniform(time.Second), nil)
	crashed(t, a, failpoint.AfterPark)
	r := c.await(seqs, 150*time.Second)
	requireKafkaSafe(t, r)
	waitEmpty(t, b)
	in := inCounts(t, b)
	t.Logf("A2: crash after park, before commit: %s; the survivor parked %d, absorbed %d redeliveries by tombstones",
		r, in["parked"], in["already_delivered"])
	if r.idsPerSeq > 1 {
		t.Fatalf("a record was parked under %d ids", r.idsPerSeq)
	}
	if r.reparked != 0 {
		t.Fatalf("%d records were parked and delivered again after their delivery", r.reparked)
	}
}

// D1 (Kafka): for 2 s while due records are released, the bridge's produce requests fail
// (kfake control), alternately by a dropped connection and by an UNKNOWN_SERVER_ERROR
// answer, which kafka-go does not retry itself. The failed writes are retried by egress
// after BRIDGE_RETRY_BACKOFF and land once the brokers take requests again: lost 0,
// early 0. kafka-go has no idempotent producer, so copies are possible; they carry the
// same x-delay-id (counted, not asserted).
func TestD1KafkaDisconnectDuringPublish(t *testing.T) {
	k := newKafkaStack(t)
	c := newKafkaChecker(t, k)
	e2etest.StartReady(t, bridgeBin, k.envWith("BRIDGE_RETRY_BACKOFF", "200ms"))
	seqs := c.send("d1k", 2000, -1, uniform(2*time.Second), nil)
	kf := k.kafka.Kfake()
	var failed atomic.Int64
	until := time.Now().Add(2 * time.Second)
	kf.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if time.Now().After(until) {
			return nil, nil, false // handled by the cluster; this control is dropped
		}
		kf.KeepControl()
		if failed.Add(1)%2 == 0 {
			return nil, errors.New("d1: connection dropped"), true
		}
		resp, _ := produceErrors(req, func(string) int16 { return -1 }) // UNKNOWN_SERVER_ERROR
		return resp, nil, true
	})
	r := c.await(seqs, 60*time.Second)
	t.Logf("D1 (Kafka): %d produce requests failed over 2 s: %s", failed.Load(), r)
	requireKafkaSafe(t, r)
	if failed.Load() == 0 {
		t.Fatal("no produce request failed: the fault did not happen")
	}
	if r.idsPerSeq > 1 {
		t.Fatalf("copies of one message carry %d different x-delay-ids", r.idsPerSeq)
	}
}

// D4 (Kafka): the brokers answer TOPIC_AUTHORIZATION_FAILED for the target topic
// forbidden.k: its records are dead-lettered (forbidden) after one attempt, while
// out.fault loses nothing.
func TestD4KafkaTopicAuthorizationFailed(t *testing.T) {
	k := newKafkaStack(t)
	testkafkaCreate(t, k, "forbidden.k")
	c := newKafkaChecker(t, k)
	// kfake's own fault: the topic's partitions answer TOPIC_AUTHORIZATION_FAILED, the other
	// topics of the same produce request are written (a producer puts every topic led by
	// one broker in one request).
	refuse := k.kafka.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "forbidden.k",
		Err: kerr.TopicAuthorizationFailed, Count: -1})
	defer refuse.Remove()
	e2etest.StartReady(t, bridgeBin, k.envWith())
	bad := c.sendTarget("d4k-bad", "forbidden.k", 200, uniform(time.Second))
	seqs := c.send("d4k", 1000, -1, uniform(time.Second), nil)
	r := c.await(seqs, 30*time.Second)
	requireKafkaSafe(t, r)
	got, reasons := c.awaitDead(bad, 15*time.Second)
	t.Logf("D4 (Kafka): %d/%d dead-lettered %v; allowed %s", got, len(bad), reasons, r)
	if got != len(bad) || reasons["forbidden"] != len(bad) {
		t.Fatalf("want all %d dead-lettered forbidden, got %d %v", len(bad), got, reasons)
	}
}
