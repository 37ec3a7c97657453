package egress

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
)

// collectSettlements gathers the settlements delivery hands back until they settle n
// messages.
type collectSettlements struct {
	mu  sync.Mutex
	sts []*settlement
	n   int
}

func (c *collectSettlements) settle(st *settlement) {
	c.mu.Lock()
	c.sts = append(c.sts, st)
	c.n += st.n
	c.mu.Unlock()
}

func (c *collectSettlements) wait(t *testing.T, n int, within time.Duration) (acks map[string]bool, retries map[string]delaystore.RetryRequest) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c.mu.Lock()
		got := c.n
		c.mu.Unlock()
		if got == n {
			break
		}
		if got > n || time.Now().After(deadline) {
			t.Fatalf("settlements settle %d messages, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	acks, retries = map[string]bool{}, map[string]delaystore.RetryRequest{}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.sts {
		for _, r := range st.acks {
			acks[r.ID] = true
		}
		for _, r := range st.retries {
			retries[r.ID] = r
		}
	}
	return acks, retries
}

// TestDeliveryAlone: delivery without a scheduler or store, through a real publisher (a
// watermill gochannel) on an injected clock. Of one claimed batch it publishes what its
// targets take, dead-letters what expired by its clock, retries what failed with the
// first backoff, puts back what is over a target's in-flight limit, and hands all of it
// back through settle, each message once.
func TestDeliveryAlone(t *testing.T) {
	gc := newBroker(t)
	out, dlq := collect(t, gc, "out"), collect(t, gc, "delay.dlq")
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // the injected clock, far from the process clock
	cfg := Config{DLQSubject: "delay.dlq", TargetInflight: 2, Now: func() time.Time { return now }}
	cfg.defaults()
	d, err := newDelivery(cfg, map[string]message.Publisher{"nats": gc}, nil, &redisClock{},
		slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	due := now.UnixMilli() - 1000
	claimed := func(id, target string, expires time.Duration) delaystore.Claimed {
		return delaystore.Claimed{Receipt: delaystore.Receipt{ID: id, Shard: 3, Version: 1}, Due: due,
			Envelope: delaystore.Envelope{Target: target, Source: "nats:delay.in", Expires: expires, Payload: []byte(id)}}
	}
	b := batch{shard: 3, fence: time.Now(), claimed: []delaystore.Claimed{
		claimed("a1", "nats:out", 0), claimed("a2", "nats:out", 0), claimed("a3", "nats:out", 0), // a3: over the limit of 2
		claimed("late", "nats:other", 500*time.Millisecond), // due 1 s ago by the injected clock, expires after 0.5 s
		claimed("k1", "kafka:out", 0),                       // no kafka publisher: a failed publish
	}}
	var c collectSettlements
	d.submit(context.Background(), b, c.settle)
	acks, retries := c.wait(t, len(b.claimed), 10*time.Second)

	for _, id := range []string{"a1", "a2"} {
		if g := waitFor(t, out, 5*time.Second); !acks[id] || g.msg.Metadata.Get(contract.HeaderID) == "" {
			t.Errorf("%s: acked %v, published %v", id, acks[id], g.msg.Metadata)
		}
	}
	if g := waitFor(t, dlq, 5*time.Second); !acks["late"] || g.msg.Metadata.Get(contract.HeaderID) != "late" ||
		!strings.HasPrefix(g.msg.Metadata.Get(contract.HeaderError), contract.ReasonExpired) {
		t.Errorf("late: acked %v, dead letter %v", acks["late"], g.msg.Metadata)
	}
	if r, ok := retries["a3"]; !ok || !r.PutBack || r.Backoff != putBackMin {
		t.Errorf("a3: %+v, want put back for %s", r, putBackMin)
	}
	if r, ok := retries["k1"]; !ok || r.PutBack || r.Backoff != cfg.BackoffMin {
		t.Errorf("k1: %+v, want a retry after %s", r, cfg.BackoffMin)
	}
	if len(acks) != 3 || len(retries) != 2 {
		t.Errorf("acks %v, retries %v: want 3 and 2", acks, retries)
	}
	for _, st := range c.sts {
		if st.shard != 3 {
			t.Errorf("a settlement of shard %d, want 3", st.shard)
		}
	}
}
