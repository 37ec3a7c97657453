package ingress

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// heldPublisher is a dead-letter publisher whose publishes wait until release is closed,
// then are recorded.
type heldPublisher struct {
	release chan struct{}
	mu      sync.Mutex
	got     []*message.Message
}

func (p *heldPublisher) Publish(_ string, msgs ...*message.Message) error {
	<-p.release
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, msgs...)
	return nil
}

func (p *heldPublisher) Close() error { return nil }

// TestOverQuotaDeadLettered: messages over their target's BRIDGE_TARGET_QUOTA are not
// parked but dead-lettered with reason quota_exceeded, and their source is acked only
// once the dead letter is published; the quota's messages are parked and acked at once;
// a target of no pattern is not limited.
func TestOverQuotaDeadLettered(t *testing.T) {
	st := storetest.NewWith(t, delaystore.Config{Lease: 5 * time.Second, TargetQuota: "tenant-a.*=3"})
	src := &orderedSource{}
	for i := range 5 {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
		m.Metadata = headers.ToMetadata(headers.List{{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "tenant-a.orders"},
			{Key: "x-delay-id", Value: fmt.Sprintf("q%d", i)}}, nil)
		src.msgs = append(src.msgs, m)
	}
	src.msgs = append(src.msgs, delayedMsg("other"))
	dlq := &heldPublisher{release: make(chan struct{})}
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", Lanes: 1, BatchSize: 64, Linger: 50 * time.Millisecond,
		RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond}, st,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: dlq}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, in)

	// Which 2 of the 5 are over depends on the order of the shards in the call: the 2
	// not acked while the dead letters are held.
	waitAcked(t, "message of a target without quota", src.msgs[5])
	var held []*message.Message
	deadline := time.Now().Add(5 * time.Second)
	for acked := 0; acked < 3; {
		if time.Now().After(deadline) {
			close(dlq.release)
			t.Fatalf("%d of the quota's messages acked, want 3", acked)
		}
		acked, held = 0, held[:0]
		for _, m := range src.msgs[:5] {
			select {
			case <-m.Acked():
				acked++
			default:
				held = append(held, m)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	for _, m := range held {
		select {
		case <-m.Acked():
			close(dlq.release)
			t.Fatalf("over-quota message %s acked before its dead letter was published", m.Payload)
		default:
		}
	}
	close(dlq.release)
	waitAcked(t, "dead-lettered", held...)
	dlq.mu.Lock()
	defer dlq.mu.Unlock()
	if len(dlq.got) != 2 || len(held) != 2 {
		t.Fatalf("%d dead letters (%d held), want 2", len(dlq.got), len(held))
	}
	// The dead letters are published concurrently (reject): in any order.
	for _, m := range dlq.got {
		e, _ := headers.FromMetadata(m.Metadata).Get(contract.HeaderError)
		if !strings.HasPrefix(e, contract.ReasonQuotaExceeded+": ") ||
			!slices.ContainsFunc(held, func(h *message.Message) bool { return string(h.Payload) == string(m.Payload) }) {
			t.Fatalf("dead letter %q (held %q, %q), x-delay-error %q", m.Payload, held[0].Payload, held[1].Payload, e)
		}
	}
	if string(dlq.got[0].Payload) == string(dlq.got[1].Payload) {
		t.Fatalf("two dead letters of %q", dlq.got[0].Payload)
	}
	s, err := st.Stats(context.Background())
	if err != nil || s.Parked != 4 {
		t.Fatalf("%d parked (%v), want the 3 of the quota and the other", s.Parked, err)
	}
}
