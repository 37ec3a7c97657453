package nats_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	wmnats "github.com/delaybridge/delaybridge/internal/broker/nats"
)

// A JetStream message held by its receiver (a park blocked on a slow Redis) is reported in
// progress, so the server does not redeliver it while it is worked on; MaxProgress caps
// that, and a negative MaxProgress turns it off.
func TestJetStreamInProgressWhileHeld(t *testing.T) {
	const ackWait = 500 * time.Millisecond
	for _, tc := range []struct {
		name        string
		maxProgress time.Duration
		redelivered bool
	}{
		{"default: held for 4 AckWaits without redelivery", 0, false},
		{"capped: redelivered after MaxProgress", 1200 * time.Millisecond, true},
		{"off: redelivered after AckWait", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			cfg := wmnats.SubscriberConfig{Stream: "S", AckWait: ackWait, MaxProgress: tc.maxProgress}
			_, ch := e.subscribe(t, cfg, "js.progress")
			msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
			if err := e.publisher(t, wmnats.PublisherConfig{}).Publish("js.progress", msg); err != nil {
				t.Fatal(err)
			}
			held := next(t, ch)
			var again *message.Message
			select {
			case again = <-ch:
			case <-time.After(4 * ackWait):
			}
			if !tc.redelivered {
				if again != nil {
					t.Fatalf("redelivered while held (%s after AckWait %s)", 4*ackWait, ackWait)
				}
				held.Ack()
				return
			}
			if again == nil {
				again = next(t, ch)
			}
			if again.UUID != held.UUID {
				t.Fatalf("got %s, want the held %s again", again.UUID, held.UUID)
			}
			again.Ack()
			held.Ack()
		})
	}
}
