// Package testnats runs an embedded nats-server (with JetStream) for tests.
//
// Each [Start] gives the test its own server on a random port with its own store
// directory; it is shut down when the test ends. Helpers take testing.TB, call
// t.Helper and fail the test on error.
package testnats

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const readyTimeout = 10 * time.Second

// Server is an embedded nats-server. Its methods are safe for concurrent use.
type Server struct {
	mu   sync.Mutex
	srv  *server.Server
	opts *server.Options // pristine template: every (re)start uses a clone
}

// Start runs an embedded nats-server on 127.0.0.1 and a random port, with JetStream
// enabled and its store in t.TempDir(). opts may change the options before the start.
// The server is shut down when the test ends.
func Start(t testing.TB, opts ...func(*server.Options)) *Server {
	t.Helper()
	o := &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	for _, f := range opts {
		f(o)
	}
	s := &Server{opts: o.Clone()}
	srv, err := run(o.Clone())
	if err != nil {
		t.Fatalf("testnats: %v", err)
	}
	// Pin the port so that Restart comes back where clients reconnect.
	if addr, ok := srv.Addr().(*net.TCPAddr); ok {
		s.opts.Port = addr.Port
	}
	s.srv = srv
	t.Cleanup(s.Shutdown)
	return s
}

func run(o *server.Options) (*server.Server, error) {
	srv, err := server.NewServer(o)
	if err != nil {
		return nil, err
	}
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return nil, errNotReady
	}
	return srv, nil
}

var errNotReady = errors.New("nats-server not ready for connections within 10s")

// URL is the client URL (nats://127.0.0.1:port). It stays the same across [Server.Restart].
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv.ClientURL()
}

// NATS returns the running server.
func (s *Server) NATS() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Restart shuts the server down and starts a new one with the same options, port and
// store directory (JetStream streams, messages and consumer state survive). Clients
// with reconnects enabled reconnect on their own.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	var err error
	for deadline := time.Now().Add(readyTimeout); ; {
		var srv *server.Server
		srv, err = run(s.opts.Clone())
		if err == nil {
			s.srv = srv
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the port may linger for a moment
	}
	t.Fatalf("testnats: restart: %v", err)
}

// Shutdown stops the server and waits for it. It is idempotent; Start registers it as a cleanup.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// Connect opens a client connection to url that reconnects forever (every 50ms) and
// is closed when the test ends.
func Connect(t testing.TB, url string) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(url,
		natsgo.Name("testnats"),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(50*time.Millisecond),
		natsgo.ReconnectJitter(0, 0),
	)
	if err != nil {
		t.Fatalf("testnats: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// CreateStream creates a JetStream stream (file storage, default limits) named name
// that captures subjects.
func CreateStream(t testing.TB, nc *natsgo.Conn, name string, subjects ...string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testnats: jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects}); err != nil {
		t.Fatalf("testnats: create stream %s %v: %v", name, subjects, err)
	}
}
