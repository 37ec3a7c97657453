package egress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// hanging is a publisher whose publishes to one topic never complete: they fail only when
// the messages' context ends (a JetStream stream that stores but never acknowledges). It
// records the most messages held in Publish at once.
type hanging struct {
	message.Publisher
	topic string

	mu            sync.Mutex
	held, maxHeld int
}

func (h *hanging) Publish(topic string, msgs ...*message.Message) error {
	if topic != h.topic {
		return h.Publisher.Publish(topic, msgs...)
	}
	h.hold(len(msgs))
	defer h.hold(-len(msgs))
	<-msgs[0].Context().Done()
	return fmt.Errorf("no publish acknowledgement: %w", msgs[0].Context().Err())
}

func (h *hanging) hold(n int) {
	h.mu.Lock()
	h.held += n
	h.maxHeld = max(h.maxHeld, h.held)
	h.mu.Unlock()
}

func parkAt(t *testing.T, st *delaystore.Store, id string, at int64, target string) {
	t.Helper()
	if _, err := st.Park(context.Background(), []delaystore.ParkRequest{{
		ID: id, Replace: true, Absolute: true, At: at,
		Envelope: delaystore.Envelope{Target: target, Source: "nats:delay.in", Payload: []byte("body-" + id)},
	}}); err != nil {
		t.Fatal(err)
	}
}

// TestHangingTargetDoesNotDelayOthers: 5,000 messages due at once (more than the 16 shards'
// capacity of 4 x 64) to a target whose
// publishes hang (until the 4/5-lease fence) do not make a healthy target late: its
// messages, due over 3 s, arrive at their normal lateness, and the lateness histogram
// sees them as such (observed when their own group returned). The hanging target never
// holds more than TargetInflight messages in Publish.
func TestHangingTargetDoesNotDelayOthers(t *testing.T) {
	st := storetest.New(t, 2*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "ok")
	h := &hanging{Publisher: gc, topic: "stuck"}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DLQSubject: "delay.dlq", Lease: 2 * time.Second, BatchSize: 64, TargetInflight: 20,
		MaxAttempts: 1000, BackoffMin: 100 * time.Millisecond}
	e, err := New(cfg, st, map[string]message.Publisher{"nats": h}, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	now := time.Now().UnixMilli()
	reqs := make([]delaystore.ParkRequest, 0, 5000)
	for i := range 5000 {
		reqs = append(reqs, delaystore.ParkRequest{ID: fmt.Sprintf("stuck-%d", i), Replace: true, Absolute: true, At: now,
			Envelope: delaystore.Envelope{Target: "nats:stuck", Source: "nats:delay.in"}})
	}
	if _, err := st.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	const healthy = 300
	for i := range healthy {
		parkAt(t, st, fmt.Sprintf("ok-%d", i), now+500+int64(i)*10, "nats:ok")
	}
	var late []time.Duration
	for range healthy {
		g := waitFor(t, out, 20*time.Second)
		due, _ := strconv.ParseInt(g.msg.Metadata.Get(contract.HeaderDue), 10, 64)
		late = append(late, g.at.Sub(time.UnixMilli(due)))
	}
	slices.Sort(late)
	p50, p99 := late[len(late)/2], late[len(late)*99/100]
	h.mu.Lock()
	maxHeld := h.maxHeld
	h.mu.Unlock()
	slowest := histogramMax(t, reg)
	t.Logf("healthy target beside 5000 hanging messages: lateness p50 %s p99 %s max %s; histogram's highest bucket with observations <= %gs; hanging target held at most %d in Publish",
		p50, p99, late[len(late)-1], slowest, maxHeld)
	if p99 > time.Second {
		t.Errorf("healthy target p99 lateness %s, want < 1s (a hanging group holds its batch for 1.6s)", p99)
	}
	if slowest > 1 {
		t.Errorf("lateness histogram has observations above 1s: confirmation time is not the group's own")
	}
	if maxHeld > cfg.TargetInflight {
		t.Errorf("the hanging target held %d messages in Publish, limit %d", maxHeld, cfg.TargetInflight)
	}
}

// histogramMax is the smallest bucket bound of delaybridge_delivery_lateness_seconds that
// holds every observation.
func histogramMax(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "delaybridge_delivery_lateness_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		return firstFull(h)
	}
	t.Fatal("no lateness histogram")
	return 0
}

func firstFull(h *dto.Histogram) float64 {
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() == h.GetSampleCount() {
			return b.GetUpperBound()
		}
	}
	return -1
}

// TestPutBackCountsNoAttempt: messages over their target's in-flight limit are put back
// unpublished, with no attempt counted, and all of them are delivered once the target
// takes them: none skipped, none early.
func TestPutBackCountsNoAttempt(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	out := collect(t, gc, "slow")
	g := &gate{Publisher: gc, open: make(chan struct{})}
	runEgress(t, Config{TargetInflight: 5, BatchSize: 50, MaxAttempts: 1}, st, map[string]message.Publisher{"nats": g})
	now := time.Now().UnixMilli()
	for i := range 40 {
		parkAt(t, st, fmt.Sprintf("s-%d", i), now, "nats:slow")
	}
	// While the gate is shut, 5 messages are in Publish and the others are put back again
	// and again (every 100 ms or more), untried: watch that for a second.
	deadline := time.Now().Add(10 * time.Second)
	var watchUntil time.Time
	for watchUntil.IsZero() || time.Now().Before(watchUntil) {
		for i := range 40 {
			m, err := st.Get(context.Background(), fmt.Sprintf("s-%d", i))
			if err != nil || m.Attempts != 0 {
				t.Fatalf("s-%d: %+v %v, want parked with 0 attempts", i, m, err)
			}
		}
		if watchUntil.IsZero() && g.calls() > 0 {
			watchUntil = time.Now().Add(time.Second)
		}
		if time.Now().After(deadline) {
			t.Fatal("no publish started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := g.calls(); n > 5 {
		t.Fatalf("%d Publish calls while 5 messages hold the target's limit", n)
	}
	close(g.open)
	seen := map[string]bool{}
	for range 40 {
		m := waitFor(t, out, 20*time.Second)
		id := m.msg.Metadata.Get(contract.HeaderID)
		due, _ := strconv.ParseInt(m.msg.Metadata.Get(contract.HeaderDue), 10, 64)
		if seen[id] || m.at.UnixMilli() < due {
			t.Fatalf("%s delivered twice or early", id)
		}
		seen[id] = true
	}
	waitEmpty(t, st)
}

// gate is a publisher that holds every Publish until open is closed (or the messages'
// context ends).
type gate struct {
	message.Publisher
	open chan struct{}

	mu sync.Mutex
	n  int
}

func (g *gate) Publish(topic string, msgs ...*message.Message) error {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	select {
	case <-g.open:
		return g.Publisher.Publish(topic, msgs...)
	case <-msgs[0].Context().Done():
		return msgs[0].Context().Err()
	}
}

func (g *gate) calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// tooLarge refuses, as too large, every message with a payload longer than limit, on
// every topic (target and dead-letter subject alike), as a NATS server with max_payload.
type tooLarge struct {
	message.Publisher
	limit int

	mu    sync.Mutex
	calls int
}

func (p *tooLarge) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	for _, m := range msgs {
		if len(m.Payload) > p.limit {
			return fmt.Errorf("publish to %s: %w", topic, rejection{"too_large"})
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

type rejection struct{ reason string }

func (r rejection) Error() string        { return "maximum payload exceeded" }
func (r rejection) RejectReason() string { return r.reason }

// TestTooLargeDeadLetterWithoutPayload: a message that its target and the dead-letter
// subject both refuse as too large is dead-lettered once, after one attempt, without its
// payload (headers, x-delay-error and x-delay-original-size kept), and leaves the store:
// never retried forever.
func TestTooLargeDeadLetterWithoutPayload(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	gc := newBroker(t)
	dlq := collect(t, gc, "delay.dlq")
	p := &tooLarge{Publisher: gc, limit: 100}
	runEgress(t, Config{MaxAttempts: 100, BackoffMin: 50 * time.Millisecond}, st, map[string]message.Publisher{"nats": p})
	big := make([]byte, 1000)
	if _, err := st.Park(context.Background(), []delaystore.ParkRequest{{ID: "huge", Replace: true,
		Envelope: delaystore.Envelope{Target: "nats:big", Source: "nats:delay.in", Payload: big,
			Headers: headers.List{{Key: "tenant", Value: "acme"}}}}}); err != nil {
		t.Fatal(err)
	}
	g := waitFor(t, dlq, 10*time.Second)
	hs := headers.FromMetadata(g.msg.Metadata)
	size, _ := hs.Get(contract.HeaderOriginalSize)
	reason, _ := hs.Get(contract.HeaderError)
	tenant, _ := hs.Get("tenant")
	if len(g.msg.Payload) != 0 || size != "1000" || tenant != "acme" || reason[:len("too_large: ")] != "too_large: " {
		t.Fatalf("dead letter: payload %d bytes, %s=%q, %s=%q, tenant %q", len(g.msg.Payload), contract.HeaderOriginalSize, size, contract.HeaderError, reason, tenant)
	}
	waitEmpty(t, st)
	p.mu.Lock()
	calls := p.calls
	p.mu.Unlock()
	if calls != 3 {
		t.Fatalf("%d publish calls, want 3: the target, the dead letter, the dead letter without payload", calls)
	}
}

// failingDLQ fails every publish (target and dead-letter subject).
type failingDLQ struct{}

func (failingDLQ) Publish(string, ...*message.Message) error { return errors.New("nats: timeout") }
func (failingDLQ) Close() error                              { return nil }

// TestDeadLetterFailureStaysOverdue: a message out of attempts whose dead letter cannot be
// published stays in the store, is scheduled again, is counted as dead_letter_failed and
// as overdue (through the retry set, although its next try is an hour away): never stuck
// silently.
func TestDeadLetterFailureStaysOverdue(t *testing.T) {
	st := storetest.New(t, 5*time.Second)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// One attempt, then the dead letter fails: the next try is an hour away, so only the
	// retry set can show the message as overdue.
	e, err := New(Config{DLQSubject: "delay.dlq", MaxAttempts: 1, BackoffMin: time.Hour},
		st, map[string]message.Publisher{"nats": failingDLQ{}}, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	park(t, st, "stuck", 0, "nats:gone", nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		msg, err := st.Get(ctx, "stuck")
		obs, oerr := st.Observe(ctx, []int{st.ShardOf("stuck")}, nil)
		overdue := int64(0)
		for _, g := range obs.Shards {
			overdue += g.Overdue
		}
		if err == nil && oerr == nil && msg.Attempts == 1 && overdue == 1 && counter(t, reg, "dead_letter_failed") == 1 {
			t.Logf("after %d attempts still stored, overdue %d, dead_letter_failed %g", msg.Attempts, overdue, counter(t, reg, "dead_letter_failed"))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %+v (%v), overdue %d (%v), dead_letter_failed %g", msg, err, overdue, oerr, counter(t, reg, "dead_letter_failed"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counter is delaybridge_messages_out_total{result} summed over brokers.
func counter(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "delaybridge_messages_out_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// slowAcks is the store with every round trip that acks taking 20 ms longer (a Redis
// under load): groups that complete meanwhile must be settled together, not one call each.
type slowAcks struct {
	*delaystore.Store
	mu    sync.Mutex
	calls int
}

func (s *slowAcks) Exchange(ctx context.Context, acks []delaystore.Receipt, retries []delaystore.RetryRequest,
	claims []delaystore.ClaimRequest) delaystore.Exchanged {
	if len(acks) > 0 {
		s.mu.Lock()
		s.calls++
		s.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	return s.Store.Exchange(ctx, acks, retries, claims)
}

// counting counts Publish calls (one per target group).
type counting struct {
	message.Publisher
	mu    sync.Mutex
	calls int
}

func (c *counting) Publish(topic string, msgs ...*message.Message) error {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.Publisher.Publish(topic, msgs...)
}

// TestSettlerCoalesces: 1,000 messages due at once to 100 targets make hundreds of target
// groups; the scheduler sends the acks of every group that completed while its last round
// trip ran in the next one, so there are far fewer round trips with acks than groups.
func TestSettlerCoalesces(t *testing.T) {
	st := &slowAcks{Store: storetest.New(t, 30*time.Second)}
	gc := newBroker(t)
	p := &counting{Publisher: gc}
	now := time.Now().UnixMilli()
	var reqs []delaystore.ParkRequest
	for i := range 1000 {
		reqs = append(reqs, delaystore.ParkRequest{ID: fmt.Sprintf("c-%d", i), Replace: true, Absolute: true, At: now,
			Envelope: delaystore.Envelope{Target: fmt.Sprintf("nats:t%d", i%100), Source: "nats:delay.in"}})
	}
	if _, err := st.Park(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	runEgress(t, Config{}, st, map[string]message.Publisher{"nats": p})
	waitEmpty(t, st.Store)
	st.mu.Lock()
	acks := st.calls
	st.mu.Unlock()
	p.mu.Lock()
	groups := p.calls
	p.mu.Unlock()
	t.Logf("%d target groups settled in %d Ack calls", groups, acks)
	if acks*4 > groups {
		t.Fatalf("%d Ack calls for %d groups: settlements are not coalesced", acks, groups)
	}
}
