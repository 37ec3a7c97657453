package kafka_test

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/delaybridge/delaybridge/internal/broker/brokertest"
	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// The conformance run uses watermill's suite (pubsub/tests) test by test, in the order
// and with the parallelism of tests.TestPubSub, because its TestReconnect restarts the
// broker with an external command, which an in-process kfake cannot be; it is replaced
// by the same test driving testkafka's Restart.

// uuidHeader carries the watermill UUID in the conformance runs (the suite matches
// messages by UUID); the bridge sets none.
const uuidHeader = "watermill-uuid"

// conformanceSubscriber is the subscriber configuration of the conformance runs: the
// defaults, with the UUID header and shorter times, which change no guarantee: heartbeats
// every 200ms (a rebalance is noticed sooner), a drain of 2s (the suite leaves messages
// unacked at Close), and a session of 3s. The short session matters in
// TestConcurrentClose: kafka-go does not leave the group when it is closed right after a
// sync that failed with REBALANCE_IN_PROGRESS, so the other members wait in the
// rebalance until the coordinator evicts that member when its session expires.
func conformanceSubscriber(brokers []string, group string) wmkafka.SubscriberConfig {
	return wmkafka.SubscriberConfig{
		Brokers:           brokers,
		GroupID:           group,
		UUIDHeader:        uuidHeader,
		HeartbeatInterval: 200 * time.Millisecond,
		SessionTimeout:    3 * time.Second,
		DrainTimeout:      2 * time.Second,
	}
}

// newPubSub returns a publisher and a subscriber in consumer group group, as two
// separate processes would have.
func newPubSub(t *testing.T, brokers []string, group string) (*wmkafka.Publisher, *wmkafka.Subscriber) {
	t.Helper()
	pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{
		Brokers:                brokers,
		AllowAutoTopicCreation: true,
		UUIDHeader:             uuidHeader,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := wmkafka.NewSubscriber(conformanceSubscriber(brokers, group), nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, sub
}

// testGroup is the consumer group of every subscriber that one suite test creates
// through the plain constructor: the subscribers of a test are peers in one group, as
// the replicas of a deployment are, and tests do not share groups.
func testGroup(t *testing.T) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.Name()))
	return fmt.Sprintf("conformance-%x", h.Sum64())
}

// TestConformance runs watermill's conformance suite against kfake.
//
// Features, honestly: consumer groups yes (Kafka consumer groups: the subscribers of
// one group share the partitions, each group gets every message); persistent yes;
// order no: messages are handed out before earlier ones are acked and a Nack hands the
// record out again later, and records without a key (all of the suite's) are spread
// over partitions, so there is no order across a topic (TestNoAck and
// TestPublishSubscribeInOrder skip themselves); exactly-once no. A new subscriber does
// not receive old messages: it joins the same group as the earlier ones (the
// constructor gives every subscriber of a test one group), which has committed them;
// only a new group starts at the first offset (StartOffset), see
// TestNewGroupStartsAtFirstOffset. TestReconnect is replaced by reconnect (below),
// because the suite can only restart a broker with an external command.
//
// Each test's topic is auto-created by its first publish or subscribe, with kfake's 10
// partitions.
func TestConformance(t *testing.T) {
	cluster := testkafka.Start(t)
	brokers := cluster.Brokers()
	features := tests.Features{
		ConsumerGroups:                   true,
		ExactlyOnceDelivery:              false,
		GuaranteedOrder:                  false,
		Persistent:                       true,
		NewSubscriberReceivesOldMessages: false,
		GenerateTopicFunc: func(tctx tests.TestContext) string {
			return "conformance-" + tctx.TestID.String()
		},
	}
	brokertest.RunSuite(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return newPubSub(t, brokers, testGroup(t)) },
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return newPubSub(t, brokers, group)
		},
		map[string]brokertest.RunFunc{"TestReconnect": reconnect},
	)
}

// reconnect is watermill's TestReconnect on its own cluster, restarted (same ports and
// data directory) with testkafka instead of an external command: 100 publishers send
// 10000 messages, one per Publish, retrying failed ones, while the cluster restarts
// after 1/3 and 1/2 of them; the subscriber must receive every one.
func reconnect(t *testing.T, tctx tests.TestContext) {
	cluster := testkafka.Start(t)
	brokers := cluster.Brokers()
	pub, sub := newPubSub(t, brokers, testGroup(t))
	defer func() {
		if err := pub.Close(); err != nil {
			t.Error(err)
		}
		if err := sub.Close(); err != nil {
			t.Error(err)
		}
	}()
	topic := "conformance-" + tctx.TestID.String()

	const messagesCount = 10000
	const publishersCount = 100
	restartAt := map[int]bool{messagesCount / 3: true, messagesCount / 2: true}

	messages, err := sub.Subscribe(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var published message.Messages
	publish := make(chan struct{})
	restart := make(chan struct{}, 2)
	go func() {
		for i := range messagesCount {
			publish <- struct{}{}
			if restartAt[i] {
				restart <- struct{}{}
			}
		}
		close(publish)
	}()
	var publishers sync.WaitGroup
	for range publishersCount {
		publishers.Add(1)
		go func() {
			defer publishers.Done()
			for range publish {
				msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
				for {
					if rand.IntN(10) == 0 { // as the suite: some randomization in sending
						time.Sleep(500 * time.Millisecond)
					}
					if err := pub.Publish(topic, msg); err == nil {
						break
					}
					time.Sleep(500 * time.Millisecond)
				}
				mu.Lock()
				published = append(published, msg)
				mu.Unlock()
			}
		}()
	}

	type result struct {
		msgs message.Messages
		all  bool
	}
	done := make(chan result, 1)
	go func() {
		msgs, all := readUnique(messages, messagesCount, 60*time.Second)
		done <- result{msgs, all}
	}()
	var res result
	for waiting := true; waiting; {
		select {
		case <-restart: // restarted here: t.Fatal belongs to the test's goroutine
			start := time.Now()
			cluster.Restart(t)
			t.Logf("cluster restarted in %s", time.Since(start))
		case res = <-done:
			waiting = false
		}
	}
	publishers.Wait()
	if !res.all {
		t.Errorf("not all messages received (has %d of %d)", len(res.msgs), messagesCount)
	}
	mu.Lock()
	defer mu.Unlock()
	tests.AssertAllMessagesReceived(t, published, res.msgs)
}

// readUnique reads messages from ch, acking each, until limit distinct UUIDs arrived or
// timeout passed without a message.
func readUnique(ch <-chan *message.Message, limit int, timeout time.Duration) (message.Messages, bool) {
	seen := map[string]bool{}
	var out message.Messages
	for len(out) < limit {
		select {
		case m, ok := <-ch:
			if !ok {
				return out, false
			}
			if !seen[m.UUID] {
				seen[m.UUID] = true
				out = append(out, m)
			}
			m.Ack()
		case <-time.After(timeout):
			return out, false
		}
	}
	return out, true
}
