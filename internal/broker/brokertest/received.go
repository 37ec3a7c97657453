package brokertest

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// NextReceived returns the next message of an adapter's fast-path channel (SubscribeReceived),
// failing the test when the channel is closed or nothing comes within wait.
func NextReceived(t *testing.T, ch <-chan *headers.Received, wait time.Duration) *headers.Received {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("channel closed, want a message")
		}
		return r
	case <-time.After(wait):
		t.Fatalf("no message within %s", wait)
	}
	return nil
}
