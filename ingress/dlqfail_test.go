package ingress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// failingDLQ is a dead-letter publisher that refuses every publish while failing is set
// (counting the attempts) and records the dead letters it takes otherwise.
type failingDLQ struct {
	failing  atomic.Bool
	attempts atomic.Int64
	mu       sync.Mutex
	got      []*message.Message
}

func (d *failingDLQ) Publish(_ string, msgs ...*message.Message) error {
	d.attempts.Add(1)
	if d.failing.Load() {
		return errors.New("dlq: unknown topic or partition")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, msgs...)
	return nil
}

func (d *failingDLQ) Close() error { return nil }

func (d *failingDLQ) letters() []*message.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// TestFailingDeadLetterHoldsOnlyItsMessage: while every dead-letter publish fails, a bad
// message (x-delay abc) at the head of "partition 0" waits alone, neither acked nor
// nacked (its source position is not passed), while the valid messages after it, on its
// partition and another, are parked and acked. A redelivery of the bad message (same
// source id) joins it. Once the dead-letter subject takes writes again, the bad message
// is dead-lettered once and both copies are acked.
func TestFailingDeadLetterHoldsOnlyItsMessage(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	src, ev := newFastSource(), newEvents()
	dlq := &failingDLQ{}
	dlq.failing.Store(true)
	runFastDLQ(t, st, src, dlq)

	bad, _ := receivedMsg(ev, "bad", "kafka:delay.in:0:0", headers.List{{Key: "x-delay", Value: "abc"}, {Key: "x-target", Value: "a.b"}})
	src.ch <- bad
	want := map[string]bool{}
	for i := range 20 {
		p, off := i%2, 1+i/2
		name := fmt.Sprintf("p%d-%d", p, off)
		m, _ := receivedMsg(ev, name, fmt.Sprintf("kafka:delay.in:%d:%d", p, off),
			headers.List{{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "a.b"}, {Key: "x-delay-id", Value: name}})
		src.ch <- m
		want["ack "+name] = true
	}
	for len(want) > 0 {
		e := ev.next(t) // fails after 5 s without an event: the valid messages wait for the bad one
		if !want[e] {
			t.Fatalf("event %q while the dead-letter subject fails (waiting for %d acks)", e, len(want))
		}
		delete(want, e)
	}
	deadline := time.Now().Add(5 * time.Second)
	for dlq.attempts.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d dead-letter attempts, want it retried", dlq.attempts.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	again, _ := receivedMsg(ev, "bad-again", "kafka:delay.in:0:0", headers.List{{Key: "x-delay", Value: "abc"}, {Key: "x-target", Value: "a.b"}})
	src.ch <- again
	time.Sleep(50 * time.Millisecond)
	if l := ev.list(); slices.ContainsFunc(l, func(e string) bool { return e == "ack bad" || e == "nack bad" || e == "nack bad-again" }) {
		t.Fatalf("the bad message was settled while its dead letter fails: %v", l)
	}
	dlq.failing.Store(false)
	got := map[string]bool{ev.next(t): true, ev.next(t): true}
	if !got["ack bad"] || !got["ack bad-again"] {
		t.Fatalf("after the dead-letter subject recovered: %v, want both copies of the bad message acked", got)
	}
	if n := len(dlq.letters()); n != 1 {
		t.Fatalf("%d dead letters of the bad message, want 1", n)
	}
}

// TestFailingDeadLetterNackedAtStop: a message whose dead letter still fails when ingress
// stops is nacked (its source redelivers it), and Run returns.
func TestFailingDeadLetterNackedAtStop(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	src, ev := newFastSource(), newEvents()
	dlq := &failingDLQ{}
	dlq.failing.Store(true)
	_, stop := runFastDLQ(t, st, src, dlq)
	bad, _ := receivedMsg(ev, "bad", "js:IN:1", headers.List{{Key: "x-delay", Value: "-5s"}, {Key: "x-target", Value: "a.b"}})
	src.ch <- bad
	deadline := time.Now().Add(5 * time.Second)
	for dlq.attempts.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d dead-letter attempts", dlq.attempts.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if e := ev.next(t); e != "nack bad" {
		t.Fatalf("event %q at stop, want nack bad", e)
	}
}

// runFastDLQ runs an ingress over src (delay.in, Delayed) with dead-letter publisher dlq;
// the returned stop cancels it and waits for Run.
func runFastDLQ(t *testing.T, st Parker, src *fastSource, dlq message.Publisher) (*Ingress, func()) {
	t.Helper()
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond},
		st, []Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: dlq}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return in, stop
}
