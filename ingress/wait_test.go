package ingress

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// TestNotReplicatedRequests: with BRIDGE_REDIS_MIN_REPLICAS 1 and the replica paused, a
// core request (park or cancel) is answered with a not_replicated error at once, while a
// message its source can redeliver is not acked until the replica confirms it.
func TestNotReplicatedRequests(t *testing.T) {
	st, replica := storetest.NewConfirmed(t, time.Second)
	mk := func(id string, request bool, hs ...headers.Header) *message.Message {
		extra := map[string]string{}
		if request {
			extra[headers.MetaRequest] = "1"
		} else {
			extra[headers.MetaSourceID] = "js:IN:" + id
		}
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata = headers.ToMetadata(append(headers.List{{Key: "x-delay-id", Value: id}}, hs...), extra)
		return m
	}
	delayed := headers.List{{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "a.b"}}
	req, plain := mk("req-1", true, delayed...), mk("plain-1", false, delayed...)
	cancelReq := mk("req-1", true)

	replica.Signal(t, syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			replica.Signal(t, syscall.SIGCONT)
		}
	}()
	gc := newBroker(t)
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq"}, st, []Source{
		{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: &orderedSource{msgs: []*message.Message{req, plain}}},
		{Broker: intake.BrokerNATS, Topic: "delay.cancel", Kind: Cancels, Subscriber: &orderedSource{msgs: []*message.Message{cancelReq}}},
	}, map[string]message.Publisher{intake.BrokerNATS: gc}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ingress Run: %v", err)
		}
	}()

	for name, m := range map[string]*message.Message{"park request": req, "cancel request": cancelReq} {
		select {
		case <-m.Acked():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not answered while the replica is paused", name)
		}
		if r := m.Metadata.Get(headers.MetaReply); !strings.HasPrefix(r, `{"error":"not_replicated: `) {
			t.Fatalf("%s reply %s, want a not_replicated error", name, r)
		}
		t.Logf("%s: %s", name, m.Metadata.Get(headers.MetaReply))
	}
	select {
	case <-plain.Acked():
		t.Fatal("a redeliverable message acked although no replica confirmed it")
	case <-time.After(time.Second):
	}
	replica.Signal(t, syscall.SIGCONT)
	resumed = true
	select {
	case <-plain.Acked():
	case <-time.After(10 * time.Second):
		t.Fatal("not acked after the replica resumed")
	}
	if _, err := st.Get(context.Background(), "plain-1"); err != nil {
		t.Fatal(err)
	}
}
