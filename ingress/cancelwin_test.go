package ingress

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// TestCancelReadBeforeItsMessage (issue 24 item 2): a cancel read before the message it
// cancels finds nothing and is counted cancel_not_found (a cancel that removes a message
// stays cancelled); the message, published by its source before the cancel
// (headers.MetaSourceTime), arrives afterwards and is acked without being parked
// (cancelled_on_arrival); one published after the cancel is parked.
func TestCancelReadBeforeItsMessage(t *testing.T) {
	st, gc, reg := runCounted(t, Delayed, Cancels)

	count := func(result string) float64 {
		return counterValue(t, reg, "delaybridge_messages_in_total", "broker", intake.BrokerNATS, "result", result)
	}
	waitCount := func(result string, want float64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for count(result) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v, want %v", result, count(result), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	const at = "1700000000000"
	delayed := func(sent, src string) {
		send(t, gc, "delay.in", "x", headers.List{{Key: "x-delay", Value: "1h"}, {Key: "x-target", Value: "a.b"}, {Key: "x-delay-id", Value: "r-1"}},
			map[string]string{headers.MetaSourceTime: sent, headers.MetaSourceID: src})
	}
	send(t, gc, "delay.cancel", "", headers.List{{Key: "x-delay-id", Value: "r-1"}}, map[string]string{headers.MetaSourceTime: at})
	waitCount("cancel_not_found", 1)
	delayed("1699999999999", "js:IN:1")
	waitCount("cancelled_on_arrival", 1)
	if _, err := st.Get(context.Background(), "r-1"); !errors.Is(err, delaystore.ErrNotFound) {
		t.Fatalf("the message published before its cancel was parked: %v", err)
	}
	delayed("1700000000001", "js:IN:2")
	waitGet(t, st, "r-1")
	send(t, gc, "delay.cancel", "", headers.List{{Key: "x-delay-id", Value: "r-1"}}, map[string]string{headers.MetaSourceTime: "1700000000002"})
	waitCount("cancelled", 1)
	if n := count("parked"); n != 1 {
		t.Fatalf("parked = %v, want 1", n)
	}
}
