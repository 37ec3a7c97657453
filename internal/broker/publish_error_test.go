package broker

import (
	"errors"
	"strings"
	"testing"
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
