package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/contract"
)

func TestPublishError(t *testing.T) {
	cause := errors.New("too large")
	e := NewPublishError("orders", 3)
	e.Add("b", cause)
	e.Add("a", errors.New("timeout"))
	e.Add("b", cause) // recorded once
	if e.Len() != 2 || !e.Failed("a") || e.Failed("c") {
		t.Fatalf("Len %d Failed(a) %v Failed(c) %v", e.Len(), e.Failed("a"), e.Failed("c"))
	}
	m := e.FailedMessages()
	delete(m, "a")
	if !e.Failed("a") {
		t.Fatal("FailedMessages is not a copy")
	}
	if !errors.Is(e, cause) {
		t.Fatal("errors.Is does not reach the cause")
	}
	if msg := e.Error(); !strings.Contains(msg, "2 of 3") || !strings.Contains(msg, "first b: too large") {
		t.Fatalf("Error() = %q", msg)
	}
}

func TestRejectedError(t *testing.T) {
	cause := errors.New("permissions violation")
	err := fmt.Errorf("publish: %w", Reject(contract.ReasonForbidden, cause))
	if reason, ok := IsRejected(err); !ok || reason != contract.ReasonForbidden {
		t.Fatalf("IsRejected = %q, %v", reason, ok)
	}
	if !errors.Is(err, cause) {
		t.Fatal("errors.Is does not reach the cause")
	}
	if _, ok := IsRejected(cause); ok {
		t.Fatal("a plain error is a rejection")
	}
	e := NewPublishError("orders", 1)
	e.Add("a", Reject(contract.ReasonTooLarge, cause))
	if reason, ok := IsRejected(e.FailedMessages()["a"]); !ok || reason != contract.ReasonTooLarge {
		t.Fatalf("per-message rejection lost: %q %v", reason, ok)
	}
}
