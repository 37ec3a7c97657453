package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Fleet is what the Relay needs of the delay store (delaystore.Store). Safe for
// concurrent use.
type Fleet interface {
	// AnnounceTails tells every replica that relay id has tails (one PUBLISH on the
	// fleet channel; each replica's egress hands it to Heard).
	AnnounceTails(ctx context.Context, id string) error
	// PublishEvents publishes one batch to the fleet's event channel.
	PublishEvents(ctx context.Context, payload []byte) error
	// SubscribeEvents subscribes to the fleet's event channel: the batches arrive on the
	// returned channel until stop is called (which closes it). It returns once Redis
	// confirmed the subscription.
	SubscribeEvents(ctx context.Context) (batches <-chan string, stop func(), err error)
}

// Relay shares a Hub's events with the other replicas' tails (docs/design.md "Live
// events"): while its hub has tails it announces them every Every; while another relay's
// announcement is younger than TTL (Heard) it publishes its events, in batches.
type Relay struct {
	hub   *Hub
	fleet Fleet
	log   *slog.Logger
	id    string
	// Every is how often the relay announces its tails and looks at the others' (default
	// 1 s); TTL how long an announcement counts (3 Every).
	every, ttl time.Duration
	others     atomic.Int64 // unix ns until which another relay's announcement counts
}

// Relay batching and buffering (docs/design.md "Live events").
const (
	outboundBuffer = 4096
	batchMax       = 256
	batchWait      = 50 * time.Millisecond
	publishTimeout = 2 * time.Second
)

// NewRelay returns the relay of hub over fleet. every <= 0 is 1 s.
func NewRelay(hub *Hub, fleet Fleet, every time.Duration, logger *slog.Logger) *Relay {
	if every <= 0 {
		every = time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Relay{hub: hub, fleet: fleet, log: logger.With("component", "events"), id: hex.EncodeToString(b[:]),
		every: every, ttl: 3 * every}
}

// Heard notes an announcement of relay id (delaystore.WakeTails): another relay's makes
// this one publish its events for TTL; its own is ignored. Safe for concurrent use; it
// does not block.
func (r *Relay) Heard(id string) {
	if id != r.id {
		r.others.Store(time.Now().Add(r.ttl).UnixNano())
	}
}

// batch is the wire form of one PUBLISH: the relay that sent it, the events it dropped
// since its last batch, and its events.
type batch struct {
	Relay  string  `json:"relay"`
	Missed int64   `json:"missed,omitempty"`
	Events []Event `json:"events"`
}

// Run announces its tails and follows the others' every r.every until ctx ends, then
// returns nil. With no tails anywhere it sends nothing to Redis. Redis errors are logged
// at Debug and retried at the next tick.
func (r *Relay) Run(ctx context.Context) error {
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	var in, out func() // stop the inbound subscription, the outbound publisher
	defer func() {
		if in != nil {
			in()
		}
		if out != nil {
			out()
		}
	}()
	for {
		listening := r.hub.Tails() > 0
		switch {
		case listening && in == nil:
			var err error
			if in, err = r.inbound(ctx); err != nil && ctx.Err() == nil {
				r.log.Debug("events: subscribe failed", "err", err)
			}
		case !listening && in != nil:
			in()
			in = nil
		}
		if listening { // subscribed first: what the others publish on hearing it arrives
			if err := r.fleet.AnnounceTails(ctx, r.id); err != nil && ctx.Err() == nil {
				r.log.Debug("events: announcing tails failed", "err", err)
			}
		}
		others := time.Now().UnixNano() < r.others.Load()
		switch {
		case others && out == nil:
			out = r.outbound(ctx)
		case !others && out != nil:
			out()
			out = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// inbound subscribes to the fleet's events and hands the other relays' to the hub's
// tails until the returned func is called.
func (r *Relay) inbound(ctx context.Context) (func(), error) {
	batches, stop, err := r.fleet.SubscribeEvents(ctx)
	if err != nil {
		return nil, fmt.Errorf("subscribe events: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range batches {
			var b batch
			if err := json.Unmarshal([]byte(p), &b); err != nil || b.Relay == r.id {
				continue // ours (our tails had them from the hub), or not a batch
			}
			if b.Missed > 0 {
				r.hub.Remote(Event{Type: Missed, At: time.Now().UnixMilli(), Count: b.Missed})
			}
			for _, e := range b.Events {
				r.hub.Remote(e)
			}
		}
	}()
	return func() { stop(); <-done }, nil
}

// outbound attaches a subscriber to the hub and publishes its events in batches until
// the returned func is called.
func (r *Relay) outbound(ctx context.Context) func() {
	s := r.hub.outbound(outboundBuffer)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.publish(pctx, s)
	}()
	return func() { cancel(); <-done; s.Close() }
}

// publish sends s's events in batches of at most batchMax, each waiting at most
// batchWait for more after its first, until ctx ends. A batch that cannot be published
// is counted missed in the next.
func (r *Relay) publish(ctx context.Context, s *Sub) {
	evs := make([]Event, 0, batchMax)
	var lost int64
	wait := time.NewTimer(batchWait)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-s.Events():
			evs = append(evs, e)
		}
		wait.Reset(batchWait)
	fill:
		for len(evs) < batchMax {
			select {
			case <-ctx.Done():
				return
			case e := <-s.Events():
				evs = append(evs, e)
			case <-wait.C:
				break fill
			}
		}
		b := batch{Relay: r.id, Missed: lost + s.Missed(), Events: evs}
		payload, _ := json.Marshal(b) // plain fields: cannot fail
		bctx, cancel := context.WithTimeout(ctx, publishTimeout)
		err := r.fleet.PublishEvents(bctx, payload)
		cancel()
		lost = 0
		if err != nil {
			lost = b.Missed + int64(len(evs))
			if ctx.Err() == nil {
				r.log.Debug("events: publish failed", "err", err)
			}
		}
		evs = evs[:0]
	}
}
