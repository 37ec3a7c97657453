package testredis

import (
	"syscall"
	"testing"
)

func TestSignalStopCont(t *testing.T) {
	s := Start(t)
	s.Signal(t, syscall.SIGSTOP)
	if err := ping(s.Addr()); err == nil {
		t.Fatal("a stopped server answered PING")
	}
	s.Signal(t, syscall.SIGCONT)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("after SIGCONT: %v", err)
	}
	s.Signal(t, syscall.SIGSTOP)
	s.Kill() // a stopped server is still killed
}
