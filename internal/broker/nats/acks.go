package nats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// acks receives the acknowledgements of a Publisher's JetStream publishes.
// Rather than nats.go's async publish (per message: a future with its channels, its
// options, a map entry under the JetStream context's lock, a JSON decode of the PubAck),
// every JetStream message is a core publish whose reply subject names its call and its
// index, "<prefix><call>.<index>", and one wildcard subscription of the Publisher resolves
// them: a PubAck of the usual shape ({"stream":"S","seq":N}) is recognised without a
// decode, anything else (an error, a duplicate, another shape) is decoded in full.
//
// There is no window of pending acknowledgements to fill: a call registers its messages,
// waits for them within its own bounds (PublishTimeout, message contexts) and unregisters,
// so an acknowledgement that never comes, or comes late, is forgotten with its call and
// cannot hold up later publishes, to this stream or another. What is in flight is bounded
// by the callers (egress: Config.TargetInflight per target).
type acks struct {
	nc *natsgo.Conn

	mu     sync.Mutex
	sub    *natsgo.Subscription // nil until the first JetStream publish, and after close
	prefix string               // "<inbox>."
	next   uint64
	calls  map[uint64]*ackCall
	status chan natsgo.Status // the connection's disconnections, while sub is there
	closed bool
}

func newAcks(nc *natsgo.Conn) *acks { return &acks{nc: nc, calls: map[uint64]*ackCall{}} }

// ackCall is the acknowledgements awaited by one publish call: one entry per message,
// resolved once (by its acknowledgement, or by the publisher: not sent, context done,
// given up).
type ackCall struct {
	id     uint64
	prefix string // "<acks prefix><id>."

	mu      sync.Mutex
	results []ackResult
	left    int
	done    chan struct{} // closed when every entry is resolved
}

type ackResult struct {
	resolved  bool
	duplicate bool
	err       error
}

// start registers a call of n messages, subscribing on first use.
func (a *acks) start(n int) (*ackCall, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	if a.sub == nil {
		prefix := a.nc.NewInbox() + "."
		skip := len(prefix)
		sub, err := a.nc.Subscribe(prefix+"*.*", func(m *natsgo.Msg) { a.handle(m, skip) })
		if err != nil {
			return nil, fmt.Errorf("subscribe to publish acknowledgements: %w", err)
		}
		// Never drop an acknowledgement as a slow consumer: what is pending is bounded by
		// the messages in flight.
		_ = sub.SetPendingLimits(-1, -1)
		a.sub, a.prefix = sub, prefix
		a.status = a.nc.StatusChanged(natsgo.DISCONNECTED, natsgo.CLOSED)
		go a.watch(a.status)
	}
	a.next++
	c := &ackCall{id: a.next, prefix: a.prefix + strconv.FormatUint(a.next, 10) + ".",
		results: make([]ackResult, n), left: n, done: make(chan struct{})}
	if n == 0 {
		close(c.done)
	}
	a.calls[c.id] = c
	return c, nil
}

// finish unregisters c: acknowledgements that come later are dropped.
func (a *acks) finish(c *ackCall) {
	a.mu.Lock()
	delete(a.calls, c.id)
	a.mu.Unlock()
}

// close removes the subscription; later calls of start fail with ErrClosed.
func (a *acks) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.sub != nil {
		_ = a.sub.Unsubscribe()
		a.sub = nil
		a.nc.RemoveStatusListener(a.status) // ends watch
	}
}

// watch fails every registered call with nats.ErrDisconnected when the connection is
// lost (as nats.go's async publish does): acknowledgements of what was sent before are
// lost with it, and the callers retry rather than wait for PublishTimeout. It ends when
// status is closed (close) or the connection is.
func (a *acks) watch(status chan natsgo.Status) {
	for st := range status {
		a.mu.Lock()
		calls := make([]*ackCall, 0, len(a.calls))
		for _, c := range a.calls {
			calls = append(calls, c)
		}
		a.mu.Unlock()
		for _, c := range calls {
			c.giveUp(natsgo.ErrDisconnected)
		}
		if st == natsgo.CLOSED {
			return
		}
	}
}

// reply is the reply subject of message i of c.
func (c *ackCall) reply(i int) string { return c.prefix + strconv.Itoa(i) }

// resolve settles entry i (once: a later resolution is ignored).
func (c *ackCall) resolve(i int, duplicate bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.results) || c.results[i].resolved {
		return
	}
	c.results[i] = ackResult{resolved: true, duplicate: duplicate, err: err}
	if c.left--; c.left == 0 {
		close(c.done)
	}
}

// giveUp resolves every entry still open with err.
func (c *ackCall) giveUp(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.results {
		if !c.results[i].resolved {
			c.results[i] = ackResult{resolved: true, err: err}
			c.left--
		}
	}
	if c.left == 0 {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
	}
}

// resolvedAt reports whether entry i is resolved.
func (c *ackCall) resolvedAt(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results[i].resolved
}

// result is entry i (read once done is closed).
func (c *ackCall) result(i int) ackResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results[i]
}

// handle is the subscription's handler: it resolves the entry that m's subject names.
// skip is the length of the subscription's prefix.
func (a *acks) handle(m *natsgo.Msg, skip int) {
	id, i, ok := parseAckSubject(m.Subject, skip)
	if !ok {
		return
	}
	a.mu.Lock()
	c := a.calls[id]
	a.mu.Unlock()
	if c == nil {
		return // its call gave up
	}
	dup, err := decodeAck(m)
	c.resolve(i, dup, err)
}

// parseAckSubject reads "<call>.<index>" after skip bytes of subject.
func parseAckSubject(subject string, skip int) (id uint64, i int, ok bool) {
	if skip >= len(subject) {
		return 0, 0, false
	}
	rest := subject[skip:]
	dot := -1
	for j := 0; j < len(rest); j++ {
		if rest[j] == '.' {
			dot = j
			break
		}
	}
	if dot <= 0 || dot == len(rest)-1 {
		return 0, 0, false
	}
	id, ok = parseUint(rest[:dot])
	if !ok {
		return 0, 0, false
	}
	n, ok := parseUint(rest[dot+1:])
	if !ok || n > 1<<31 {
		return 0, 0, false
	}
	return id, int(n), true
}

// parseUint parses decimal digits without allocating (at most 19 of them).
func parseUint(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for j := 0; j < len(s); j++ {
		d := s[j] - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + uint64(d)
	}
	return n, true
}

var (
	ackPrefix    = []byte(`{"stream":"`)
	ackErrorKey  = []byte(`"error"`)
	ackDuplicate = []byte(`"duplicate"`)
)

// statusNoResponders is the status the server gives a request that no one (no stream)
// answers.
const statusNoResponders = "503"

// decodeAck reads a publish acknowledgement: nil for a PubAck (duplicate: the stream had
// the message already), jetstream.ErrNoStreamResponse when no stream answered, the
// server's API error (errors.Is matches jetstream's errors by code), or
// jetstream.ErrInvalidJSAck.
func decodeAck(m *natsgo.Msg) (duplicate bool, err error) {
	data := m.Data
	if len(data) == 0 && m.Header.Get("Status") == statusNoResponders {
		return false, jetstream.ErrNoStreamResponse
	}
	// The usual answer, {"stream":"OUT","seq":42} (or with a domain): no decode.
	if bytes.HasPrefix(data, ackPrefix) && data[len(data)-1] == '}' &&
		!bytes.Contains(data, ackErrorKey) && !bytes.Contains(data, ackDuplicate) {
		return false, nil
	}
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return false, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return false, r.Error
	}
	if r.Stream == "" {
		return false, jetstream.ErrInvalidJSAck
	}
	return r.Duplicate, nil
}
