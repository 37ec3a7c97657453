package ingress

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// TestReadyAtSparse: when a lane's messages are ready (readyAt). Linger after the first,
// unless the lane is sparse (fewer than sparseFill messages, all with a source id): then
// SparseLinger after the first, or half the time left to the earliest due time if that
// comes first, never before Linger.
func TestReadyAtSparse(t *testing.T) {
	const linger, sparse = 2 * time.Millisecond, 100 * time.Millisecond
	t0 := time.UnixMilli(1_700_000_000_000)
	in := &Ingress{cfg: Config{Linger: linger, SparseLinger: sparse}}
	msg := func(after time.Duration, src string, delay time.Duration) prepared {
		p := prepared{req: delaystore.ParkRequest{ID: "m", Delay: delay, Envelope: delaystore.Envelope{SourceID: src}}}
		p.at = t0.Add(after)
		return p
	}
	at := func(after time.Duration, src string, due time.Time) prepared {
		p := msg(after, src, 0)
		p.req.Absolute, p.req.At = true, due.UnixMilli()
		return p
	}
	full := func(n int) []prepared {
		var ps []prepared
		for i := range n {
			ps = append(ps, msg(0, "js:IN:"+strconv.Itoa(i+1), time.Hour))
		}
		return ps
	}
	cases := []struct {
		name    string
		pending []prepared
		want    time.Duration // after t0
	}{
		{"one, due in an hour", []prepared{msg(0, "js:IN:1", time.Hour)}, sparse},
		{"no source id (core NATS)", []prepared{msg(0, "", time.Hour)}, linger},
		{"one of them without source id", []prepared{msg(0, "js:IN:1", time.Hour), msg(time.Millisecond, "", time.Hour)}, linger},
		{"full enough", full(sparseFill), linger},
		{"one short of full", full(sparseFill - 1), sparse},
		{"due in 60 ms: half of it", []prepared{msg(0, "js:IN:1", 60*time.Millisecond)}, 30 * time.Millisecond},
		{"the second due soon", []prepared{msg(0, "js:IN:1", time.Hour), msg(10*time.Millisecond, "js:IN:2", 40*time.Millisecond)}, 30 * time.Millisecond},
		{"due now", []prepared{msg(0, "js:IN:1", 0)}, linger},
		{"due in 3 ms: not before Linger", []prepared{msg(0, "js:IN:1", 3*time.Millisecond)}, linger},
		{"absolute, due in 80 ms", []prepared{at(0, "js:IN:1", t0.Add(80*time.Millisecond))}, 40 * time.Millisecond},
		{"absolute, past", []prepared{at(0, "js:IN:1", t0.Add(-time.Second))}, linger},
		{"absolute, tomorrow", []prepared{at(0, "js:IN:1", t0.Add(24*time.Hour))}, sparse},
	}
	for _, c := range cases {
		if got := in.readyAt(c.pending).Sub(t0); got != c.want {
			t.Errorf("%s: ready %s after the first, want %s", c.name, got, c.want)
		}
	}
	in.cfg.SparseLinger = -1 // off
	if got := in.readyAt([]prepared{msg(0, "js:IN:1", time.Hour)}).Sub(t0); got != linger {
		t.Errorf("SparseLinger off: ready %s after the first, want Linger %s", got, linger)
	}
}

// sourcedMsg is a delayed message with a source id (as a JetStream or Kafka subscriber
// sets it), so that its lane may wait to fill.
func sourcedMsg(id, delay string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(id))
	m.Metadata = headers.ToMetadata(headers.List{
		{Key: "x-delay", Value: delay}, {Key: "x-target", Value: "orders.timeout"}, {Key: "x-delay-id", Value: id},
	}, nil)
	m.Metadata.Set(headers.MetaSourceID, "js:IN:"+id)
	return m
}

// runSparse runs an ingress of lanes lanes, Linger linger and SparseLinger sparse on a
// store of its own (runs of the default) through a parker that records its calls, reading
// the messages the test hands to src, until the test ends.
func runSparse(t *testing.T, lanes int, linger, sparse time.Duration) (*delaystore.Store, *gatedParker, *chanSource) {
	t.Helper()
	st := storetest.New(t, 5*time.Second)
	g := &gatedParker{Store: st, gate: make(chan struct{}), entered: make(chan struct{})}
	close(g.gate)
	src := &chanSource{ch: make(chan *message.Message)}
	in, err := New(Config{Rules: testRules(), DLQSubject: "delay.dlq", Lanes: lanes, Linger: linger, SparseLinger: sparse}, g,
		[]Source{{Broker: intake.BrokerNATS, Topic: "delay.in", Kind: Delayed, Subscriber: src}},
		map[string]message.Publisher{intake.BrokerNATS: newBroker(t)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, in)
	return st, g, src
}

// TestSparseLaneWaitsToFill: a lane holding one message with a source id waits up to
// SparseLinger for more, and a call started meanwhile by a lane that filled up (at
// Linger) does not take it along; the waiting message is parked at SparseLinger, alone.
// A message due soon is not held past half of its delay.
func TestSparseLaneWaitsToFill(t *testing.T) {
	const linger, sparse = 20 * time.Millisecond, 700 * time.Millisecond
	st, g, src := runSparse(t, 4, linger, sparse)

	start := time.Now()
	lone := sourcedMsg(idOnShard(t, 0, 0), "1h")
	src.ch <- lone
	var full []*message.Message
	for n := range sparseFill {
		m := sourcedMsg(idOnShard(t, 1, n), "1h")
		full = append(full, m)
		src.ch <- m
	}
	waitAcked(t, "a lane of sparseFill messages", full...)
	if took := time.Since(start); took > sparse/2 {
		t.Fatalf("a lane of %d messages parked after %s, want about Linger (%s)", sparseFill, took, linger)
	}
	notAcked(t, "a lone message while its lane waits to fill", lone)
	waitAcked(t, "a lone message", lone)
	if took := time.Since(start); took < sparse-50*time.Millisecond {
		t.Fatalf("a lone message parked after %s, want SparseLinger (%s)", took, sparse)
	}
	if c := g.calls(); !slices.Equal(c, []int{sparseFill, 1}) {
		t.Fatalf("park calls %v, want [%d 1]: the full lane alone, then the lone message", c, sparseFill)
	}

	start = time.Now()
	soon := sourcedMsg(idOnShard(t, 2, 0), "200ms")
	src.ch <- soon
	waitAcked(t, "a message due in 200 ms", soon)
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Fatalf("a message due in 200 ms parked after %s, want about 100 ms (half its delay), not SparseLinger", took)
	}
	got, err := st.Get(t.Context(), string(soon.Payload))
	if err != nil {
		t.Fatal(err)
	}
	if late := time.UnixMilli(got.Due).Sub(start); late < 150*time.Millisecond || late > 250*time.Millisecond {
		t.Fatalf("due %s after it was sent, want 200 ms (counted from receipt)", late)
	}
}

// positionMsg is a delayed message as a JetStream subscriber hands one without
// x-delay-id: its id is its source position, js:IN:<seq>.
func positionMsg(seq int, delay string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(seq)))
	m.Metadata = headers.ToMetadata(headers.List{{Key: "x-delay", Value: delay}, {Key: "x-target", Value: "orders.timeout"}}, nil)
	m.Metadata.Set(headers.MetaSourceID, "js:IN:"+strconv.Itoa(seq))
	return m
}

// TestSparseLanesShareACall: consecutive positions of a store with long runs take the
// lanes in turn but share a shard, so the lanes waiting to fill go in one call when the
// first of them is ready (joinSparse) rather than one call per lane, each its own script
// run for a few messages. An id of another shard, waiting in a lane too, is not taken
// along.
func TestSparseLanesShareACall(t *testing.T) {
	const lanes, linger, sparse = 4, 5 * time.Millisecond, 600 * time.Millisecond
	st, g, src := runSparse(t, lanes, linger, sparse)

	var run []*message.Message
	for seq := 1; seq <= 2*lanes; seq++ { // one run: one shard, every lane twice
		m := positionMsg(seq, "1h")
		if st.ShardOf("js:IN:"+strconv.Itoa(seq)) != st.ShardOf("js:IN:1") {
			t.Fatalf("positions 1-%d are not one run of the store", 2*lanes)
		}
		run = append(run, m)
		src.ch <- m
		if seq == 1 {
			time.Sleep(sparse / 2) // the first lane is ready well before the others
		}
	}
	// A message of another shard in a lane that the first ready lane (seq 1's) is not: its
	// lane is not covered by the call's shard, so it waits, with the run's two messages
	// in it, until it is ready itself.
	other := ""
	for i := 0; other == "" || st.ShardOf(other) == st.ShardOf("js:IN:1") || st.LaneOf(other, lanes) == st.LaneOf("js:IN:1", lanes); i++ {
		other = "x-" + strconv.Itoa(i)
	}
	lone := sourcedMsg(other, "1h")
	src.ch <- lone
	waitAcked(t, "a run's messages in every lane", run...)
	waitAcked(t, "a message of another shard", lone)
	if c := g.calls(); !slices.Equal(c, []int{len(run) - 2, 3}) {
		t.Fatalf("park calls %v, want [%d 3]: the run's messages of three lanes in one call, then the lane holding %s", c, len(run)-2, other)
	}
}
