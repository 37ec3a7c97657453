package ingress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
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

// refusingParker fails its first `down` park calls outright, parks the first half of the
// batch at the next (as a full Redis takes the pieces deliveries made room for) and all
// after that; it records when each call came.
type refusingParker struct {
	*delaystore.Store
	down  int
	mu    sync.Mutex
	calls []time.Time
}

func (p *refusingParker) Park(ctx context.Context, reqs []delaystore.ParkRequest) ([]delaystore.Parked, error) {
	p.mu.Lock()
	p.calls = append(p.calls, time.Now())
	n := len(p.calls)
	p.mu.Unlock()
	switch {
	case n <= p.down:
		return nil, errors.New("OOM command not allowed when used memory > 'maxmemory'")
	case n == p.down+1:
		half := len(reqs) / 2
		parked, err := p.Store.Park(ctx, reqs[:half])
		if err != nil {
			return nil, err
		}
		return append(parked, make([]delaystore.Parked, len(reqs)-half)...), errors.New("OOM command not allowed when used memory > 'maxmemory'")
	}
	return p.Store.Park(ctx, reqs)
}

func (p *refusingParker) times() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// TestPartialParkRetriesSoon: after an attempt that parked part of its batch the rest is
// tried again at RetryMin, not after the longer and longer waits of the failures before
// it: a full Redis takes more as deliveries free memory.
func TestPartialParkRetriesSoon(t *testing.T) {
	const down, retryMin = 5, 20 * time.Millisecond // waits 20, 40, 80, 160, 320 ms; then 20, not 640
	p := &refusingParker{Store: storetest.New(t, 5*time.Second), down: down}
	src := &orderedSource{}
	for i := range 4 {
		src.msgs = append(src.msgs, delayedMsg(fmt.Sprintf("r-%d", i)))
	}
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", Lanes: 1, BatchSize: 4, Linger: time.Millisecond,
		RetryMin: retryMin, RetryMax: 5 * time.Second}, p,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: newBroker(t)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, in)
	waitAcked(t, "a batch parked in two parts", src.msgs...)
	calls := p.times()
	if len(calls) != down+2 {
		t.Fatalf("%d park calls, want %d", len(calls), down+2)
	}
	before, after := calls[down].Sub(calls[down-1]), calls[down+1].Sub(calls[down])
	if after >= before/2 {
		t.Fatalf("the retry after a partial park came %s later, the one before it %s: want about RetryMin (%s)", after, before, retryMin)
	}
	t.Logf("wait before the partial park %s, after it %s", before, after)
}
