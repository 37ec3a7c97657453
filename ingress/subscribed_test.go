package ingress

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

// gatedSource is a message.Subscriber whose Subscribe returns only once gate is closed.
type gatedSource struct{ gate chan struct{} }

func (g *gatedSource) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ch := make(chan *message.Message)
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

func (g *gatedSource) Close() error { return nil }

// TestSubscribedOnlyAfterEverySource: readiness (Subscribed) waits for every source's
// Subscribe, so a producer that waited for /readyz finds a subscriber.
func TestSubscribedOnlyAfterEverySource(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	first, second := &gatedSource{gate: make(chan struct{})}, &gatedSource{gate: make(chan struct{})}
	close(first.gate)
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq"}, st, []Source{
		{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: first},
		{Broker: intake.BrokerNATS, Topic: "delay.cancel", Kind: Cancels, Subscriber: second},
	}, map[string]message.Publisher{intake.BrokerNATS: newBroker(t)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.Subscribed() == nil {
		t.Fatal("Subscribed before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	time.Sleep(100 * time.Millisecond) // the first source is subscribed by now
	if in.Subscribed() == nil {
		t.Fatal("Subscribed while the cancel source is still subscribing")
	}
	close(second.gate)
	deadline := time.Now().Add(5 * time.Second)
	for in.Subscribed() != nil {
		if time.Now().After(deadline) {
			t.Fatal("not Subscribed after every source subscribed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
