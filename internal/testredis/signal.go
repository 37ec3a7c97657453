package testredis

import (
	"syscall"
	"testing"
)

// Signal sends sig to the running server's process group: syscall.SIGSTOP pauses it (it
// keeps its connections but answers nothing), syscall.SIGCONT resumes it. A paused server
// is still killed by Kill and in cleanup. It calls t.Fatal when the server is not running.
func (s *Server) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		t.Fatalf("testredis: signal %v: server not running", sig)
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("testredis: signal %v: %v", sig, err)
	}
}
