package ingress

import (
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/intake"
)

// TestPartialParkAcksWhatWasParked: when the park of one shard fails and the others
// succeed (one shard refused, as a full Redis or a master whose replicas lag does), the
// messages of the parked shards are acked at once and only the others are retried, so
// they cannot be delivered and then parked again by a retry of their batch.
func TestPartialParkAcksWhatWasParked(t *testing.T) {
	// Shard 1's version counter of the wrong type: its park script fails (WRONGTYPE).
	st, repair := storetest.NewBrokenShard(t, 5*time.Second, 1)
	src := &orderedSource{}
	var good, bad []*message.Message
	for i := 0; len(good) < 5 || len(bad) < 5; i++ {
		id := fmt.Sprintf("p-%d", i)
		sh := delaystore.ShardOf(id, 4)
		if sh != 0 && sh != 1 {
			continue
		}
		m := delayedMsg(id)
		if sh == 0 {
			good = append(good, m)
		} else {
			bad = append(bad, m)
		}
		src.msgs = append(src.msgs, m)
	}
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", Lanes: 1, BatchSize: 64, Linger: 50 * time.Millisecond,
		RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond}, st,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: newBroker(t)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, in)
	for i, m := range good {
		select {
		case <-m.Acked():
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d of the healthy shard not acked while another shard fails", i)
		}
	}
	for i, m := range bad {
		select {
		case <-m.Acked():
			t.Fatalf("message %d of the failing shard acked", i)
		case <-time.After(20 * time.Millisecond):
		}
	}
	repair()
	for i, m := range bad {
		select {
		case <-m.Acked():
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d not acked after its shard recovered", i)
		}
	}
}
