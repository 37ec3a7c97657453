package events

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// MaxTails is the most tails (local subscribers) a Hub serves at once.
const MaxTails = 32

// TailBuffer is a tail's buffer: the events it may fall behind by before it misses some.
const TailBuffer = 1024

// ErrTooManyTails is returned by Hub.Tail when MaxTails tails are attached.
var ErrTooManyTails = errors.New("too many tails attached")

// Hub fans one replica's events out to its subscribers: tails (streams to clients) and,
// while another replica has tails, the Relay's outbound subscriber. Emit never blocks.
// Safe for concurrent use.
type Hub struct {
	now   func() time.Time
	mu    sync.Mutex
	tails int
	// subs is the current subscribers, replaced (never changed) under mu: Emit reads it
	// with one atomic load.
	subs atomic.Pointer[[]*Sub]
	// done is closed by Close: streams end.
	done      chan struct{}
	closeOnce sync.Once
}

// NewHub returns a hub with no subscriber. now stamps events emitted without a time
// (default time.Now).
func NewHub(now func() time.Time) *Hub {
	if now == nil {
		now = time.Now
	}
	return &Hub{now: now, done: make(chan struct{})}
}

// Sub is one subscriber of a Hub: a bounded buffer of events and the count of those that
// did not fit. Close it when done.
type Sub struct {
	hub    *Hub
	ch     chan Event
	missed atomic.Int64
	// tail: a local stream, which also gets the other replicas' events (Remote); the
	// relay's outbound subscriber is not one.
	tail bool
	once sync.Once
}

// Events is the subscriber's buffer. It is never closed.
func (s *Sub) Events() <-chan Event { return s.ch }

// Missed returns the events that did not fit since the last call, and resets the count.
func (s *Sub) Missed() int64 { return s.missed.Swap(0) }

// Close detaches the subscriber; no more events are added to its buffer. Idempotent.
func (s *Sub) Close() { s.once.Do(func() { s.hub.detach(s) }) }

// offer adds e to s's buffer, or counts it missed when the buffer is full: never blocks.
func (s *Sub) offer(e Event) {
	select {
	case s.ch <- e:
	default:
		s.missed.Add(1)
	}
}

// Active reports whether any subscriber is attached (one atomic load): callers may skip
// building events when it is false.
func (h *Hub) Active() bool {
	l := h.subs.Load()
	return l != nil && len(*l) > 0
}

// Emit hands e, an event of this replica, to every subscriber without waiting: a full
// buffer counts it missed. e.At 0 is stamped with the hub's clock. With no subscriber it
// costs one atomic load.
func (h *Hub) Emit(e Event) {
	l := h.subs.Load()
	if l == nil || len(*l) == 0 {
		return
	}
	if e.At == 0 {
		e.At = h.now().UnixMilli()
	}
	for _, s := range *l {
		s.offer(e)
	}
}

// Remote hands e, an event of another replica, to the tails only (never back to the
// relay), without waiting.
func (h *Hub) Remote(e Event) {
	l := h.subs.Load()
	if l == nil {
		return
	}
	for _, s := range *l {
		if s.tail {
			s.offer(e)
		}
	}
}

// Tail attaches a tail with a buffer of TailBuffer events, or returns ErrTooManyTails
// when MaxTails are attached.
func (h *Hub) Tail() (*Sub, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tails >= MaxTails {
		return nil, ErrTooManyTails
	}
	h.tails++
	return h.attachLocked(&Sub{hub: h, ch: make(chan Event, TailBuffer), tail: true}), nil
}

// Tails returns how many tails are attached.
func (h *Hub) Tails() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tails
}

// outbound attaches a subscriber that is not a tail (the relay's), with buffer n.
func (h *Hub) outbound(n int) *Sub {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attachLocked(&Sub{hub: h, ch: make(chan Event, n)})
}

func (h *Hub) attachLocked(s *Sub) *Sub {
	var next []*Sub
	if l := h.subs.Load(); l != nil {
		next = append(next, *l...)
	}
	next = append(next, s)
	h.subs.Store(&next)
	return s
}

func (h *Hub) detach(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.subs.Load()
	if l == nil {
		return
	}
	next := make([]*Sub, 0, len(*l))
	for _, o := range *l {
		if o != s {
			next = append(next, o)
		}
	}
	h.subs.Store(&next)
	if s.tail {
		h.tails--
	}
}

// Close tells every stream to end (Done); the bridge calls it at shutdown, so that the
// HTTP server's graceful shutdown does not wait for streams. Idempotent.
func (h *Hub) Close() { h.closeOnce.Do(func() { close(h.done) }) }

// Done is closed once Close was called.
func (h *Hub) Done() <-chan struct{} { return h.done }
