package ingress

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestIngressCountsLookalikes: a message from a broker with x-dealy is parked due now (the
// header means nothing) and forwarded with it, and ingress warns and counts it.
func TestIngressCountsLookalikes(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq"}, st,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: gc}},
		map[string]message.Publisher{intake.BrokerNATS: gc}, slog.New(slog.NewTextHandler(&logs, nil)), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for in.Subscribed() != nil {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // gochannel drops messages published before Subscribe
	send(t, gc, "delay.in", "x", headers.List{{Key: "x-dealy", Value: "30s"}, {Key: "x-target", Value: "a.b"}, {Key: "x-delay-id", Value: "la-1"}}, nil)
	parked := waitGet(t, st, "la-1")
	if v, _ := parked.Envelope.Headers.Get("x-dealy"); v != "30s" {
		t.Fatalf("x-dealy not forwarded: %v", parked.Envelope.Headers)
	}
	if n := counterValue(t, reg, "delaybridge_lookalike_headers_total", "header", "x-delay"); n != 1 {
		t.Fatalf("delaybridge_lookalike_headers_total{header=\"x-delay\"} = %v, want 1", n)
	}
	if !strings.Contains(logs.String(), "header=x-dealy resembles=x-delay source=nats:delay.in") {
		t.Fatalf("no warning:\n%s", logs.String())
	}
}
