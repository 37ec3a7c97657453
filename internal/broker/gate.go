package broker

import "sync"

// Gate lets calls in until it is closed, and lets Close wait for the calls inside: the
// closing rule of both publishers (Publish after Close fails with ErrClosed; Close waits
// for the publishes in progress). The zero value is open. Safe for concurrent use.
type Gate struct {
	mu       sync.RWMutex // guards closed against inflight.Add
	closed   bool
	inflight sync.WaitGroup
}

// Enter reports whether the gate is open; when it is, the caller is inside and must call
// Leave when done.
func (g *Gate) Enter() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return false
	}
	g.inflight.Add(1)
	return true
}

// Leave ends a call that Enter let in.
func (g *Gate) Leave() { g.inflight.Done() }

// Close closes the gate and blocks until every call inside has left. Idempotent.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.inflight.Wait()
}
