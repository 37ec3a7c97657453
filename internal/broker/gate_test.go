package broker

import (
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	var g Gate
	if !g.Enter() {
		t.Fatal("a new gate is closed")
	}
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a call was inside")
	case <-time.After(50 * time.Millisecond):
	}
	g.Leave()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the last call left")
	}
	if g.Enter() {
		t.Fatal("Enter let a call in after Close")
	}
	g.Close() // idempotent
}
