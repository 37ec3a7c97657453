package egress

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	wmnats "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// corruptRig is an egress over a store whose names can be lost, publishing to an
// embedded NATS server through pub (the NATS publisher, or a wrapper of it), with a
// core subscription to the dead-letter subject and one to every target.
type corruptRig struct {
	st       *delaystore.Store
	lose     func()
	nc       *natsgo.Conn
	dlq      *natsgo.Subscription
	targets  *natsgo.Subscription
	nats     message.Publisher
	registry *prometheus.Registry
}

func newCorruptRig(t *testing.T) *corruptRig {
	t.Helper()
	st, lose := storetest.NewNamesLost(t, 5*time.Second)
	srv := testnats.Start(t)
	r := &corruptRig{st: st, lose: lose, nc: testnats.Connect(t, srv.URL()), registry: prometheus.NewRegistry()}
	pub, err := wmnats.NewPublisher(testnats.Connect(t, srv.URL()), wmnats.PublisherConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	r.nats = pub
	if r.dlq, err = r.nc.SubscribeSync("delay.dlq"); err != nil {
		t.Fatal(err)
	}
	if r.targets, err = r.nc.SubscribeSync("orders.>"); err != nil {
		t.Fatal(err)
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs an egress publishing through pub with cfg (the dead-letter subject
// delay.dlq).
func (r *corruptRig) start(t *testing.T, cfg Config, pub message.Publisher) {
	t.Helper()
	cfg.DLQSubject = "delay.dlq"
	m, err := NewMetrics(r.registry)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, r.st, map[string]message.Publisher{"nats": pub}, slog.New(slog.DiscardHandler), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// parkCorrupt parks one message per source to orders.<n>, then loses the store's names:
// each becomes corrupt. It returns the ids by source.
func (r *corruptRig) parkCorrupt(t *testing.T, sources ...string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	var reqs []delaystore.ParkRequest
	for i, src := range sources {
		id := "c" + string(rune('a'+i))
		ids[src] = id
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Envelope: delaystore.Envelope{
			Target: "nats:orders." + id, Source: src, Payload: []byte("body-" + id),
			Headers: headers.List{{Key: "tenant", Value: "t-" + id}, {Key: "tenant", Value: "second"}}}})
	}
	if _, err := r.st.Park(t.Context(), reqs); err != nil {
		t.Fatal(err)
	}
	r.lose()
	return ids
}

// TestCorruptEntriesDeadLettered (docs/contract.md section 3, "Only its own target"):
// messages whose store lost its names (the names hashes deleted by hand) are never
// published: each is dead-lettered with reason corrupt, its id, the headers and payload
// that survived, and x-delay-source only when it survived ("http" is no code), counted by
// reason, and removed from the store.
func TestCorruptEntriesDeadLettered(t *testing.T) {
	r := newCorruptRig(t)
	ids := r.parkCorrupt(t, "nats:delay.in", "kafka:in", "http")
	r.start(t, Config{}, r.nats)
	byID := map[string]*natsgo.Msg{}
	for range ids {
		m, err := r.dlq.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("dead letters: %d of %d: %v", len(byID), len(ids), err)
		}
		byID[m.Header.Get(contract.HeaderID)] = m
	}
	for src, id := range ids {
		m := byID[id]
		if m == nil {
			t.Fatalf("no dead letter of %s (source %s): %v", id, src, byID)
		}
		if e := m.Header.Get(contract.HeaderError); !strings.HasPrefix(e, contract.ReasonCorrupt+": ") {
			t.Errorf("%s: x-delay-error %q, want corrupt: ...", id, e)
		}
		if v := m.Header.Values("tenant"); len(v) != 2 || v[0] != "t-"+id || v[1] != "second" {
			t.Errorf("%s: headers %v lost", id, m.Header)
		}
		if string(m.Data) != "body-"+id {
			t.Errorf("%s: payload %q", id, m.Data)
		}
		if tg := m.Header.Get(contract.HeaderTarget); tg != "" {
			t.Errorf("%s: x-target %q: the bridge cannot know it", id, tg)
		}
		wantSrc := ""
		if src == "http" {
			wantSrc = "http"
		}
		if s := m.Header.Get(contract.HeaderSource); s != wantSrc {
			t.Errorf("%s: x-delay-source %q, want %q", id, s, wantSrc)
		}
	}
	waitEmpty(t, r.st)
	if m, err := r.targets.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a corrupt message was published to %s", m.Subject)
	}
	if n := deadByReason(t, r.registry)[contract.ReasonCorrupt]; n != float64(len(ids)) {
		t.Fatalf("dead letters counted with reason corrupt: %g, want %d", n, len(ids))
	}
}

// TestCorruptKeptWhileDeadLetterFails: while the dead-letter subject refuses, a corrupt
// entry stays in the store (retried after BackoffMax, counted as dead_letter_failed) and
// is never published; once it takes dead letters, the entry is dead-lettered and removed.
func TestCorruptKeptWhileDeadLetterFails(t *testing.T) {
	r := newCorruptRig(t)
	r.parkCorrupt(t, "nats:delay.in")
	f := &flaky{Publisher: r.nats, failTopic: map[string]bool{"delay.dlq": true}}
	r.start(t, Config{BackoffMin: time.Millisecond, BackoffMax: 300 * time.Millisecond}, f)
	deadline := time.Now().Add(10 * time.Second)
	for counter(t, r.registry, "dead_letter_failed") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("dead_letter_failed %g: the failing dead letter was not tried twice", counter(t, r.registry, "dead_letter_failed"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s, err := r.st.Stats(t.Context()); err != nil || s.Parked != 1 {
		t.Fatalf("store holds %d (%v) while the dead letter fails; want the entry kept", s.Parked, err)
	}
	f.mu.Lock()
	delete(f.failTopic, "delay.dlq")
	f.mu.Unlock()
	m, err := r.dlq.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no dead letter once the subject takes them: %v", err)
	}
	if e := m.Header.Get(contract.HeaderError); !strings.HasPrefix(e, contract.ReasonCorrupt+": ") {
		t.Errorf("x-delay-error %q, want corrupt: ...", e)
	}
	waitEmpty(t, r.st)
	if m, err := r.targets.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a corrupt message was published to %s", m.Subject)
	}
}

// TestCorruptBrokerChoice: a corrupt entry's dead letter goes to its source broker when
// that survived and is configured, else to its target's, else to NATS, else Kafka.
func TestCorruptBrokerChoice(t *testing.T) {
	gc := newBroker(t)
	for _, tc := range []struct {
		brokers        []string
		source, target string
		want           string
	}{
		{[]string{"nats", "kafka"}, "kafka:in", "nats:out", "kafka"},
		{[]string{"nats", "kafka"}, "http", "kafka:out", "kafka"},
		{[]string{"nats", "kafka"}, "", "kafka:out", "kafka"},
		{[]string{"nats"}, "kafka:in", "", "nats"},
		{[]string{"nats", "kafka"}, "http", "", "nats"},
		{[]string{"nats", "kafka"}, "", "", "nats"},
		{[]string{"kafka"}, "", "", "kafka"},
	} {
		pubs := map[string]message.Publisher{}
		for _, b := range tc.brokers {
			pubs[b] = gc
		}
		d := &delivery{publishers: pubs}
		if got := d.corruptBroker(delaystore.Envelope{Source: tc.source, Target: tc.target}); got != tc.want {
			t.Errorf("brokers %v, source %q, target %q: %s, want %s", tc.brokers, tc.source, tc.target, got, tc.want)
		}
	}
}

// deadByReason sums delaybridge_dead_letters_out_total by reason.
func deadByReason(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "delaybridge_dead_letters_out_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "reason" {
					got[l.GetValue()] += s.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}
