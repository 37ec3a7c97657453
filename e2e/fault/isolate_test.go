//go:build fault

package fault

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// D7: one target whose publishes hang (a JetStream stream with no_ack: it stores every
// message and never acknowledges one) gets half of 150 msgs/s over 10 s, a healthy target
// the other half; in the burst variant the hanging target also gets 5,000 messages due at
// once. The healthy target's lateness must stay at its normal level (issue 12: p99 <= 50 ms
// on a quiet machine; asserted: < 1 s, the shared CI machine is loaded). Before issue 12 a
// batch settled only after its slowest target: p99 3.9 s, and 8.3 s with the burst.
func TestD7HangingTargetIsolated(t *testing.T) {
	for _, burst := range []int{0, 5000} {
		t.Run("burst "+strconv.Itoa(burst), func(t *testing.T) {
			s := newStack(t)
			createStream(t, s.js, jetstream.StreamConfig{Name: "HANG", Subjects: []string{"hang.>"}, NoAck: true})
			c := newChecker(t, s)
			l := watchLateness(t, s.nc, "out.fault")
			// The production lease: a hanging publish ends at the NATS publish timeout (5 s).
			e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_LEASE", "30s"))
			seqs := c.send("d7", 750, uniform(10*time.Second))
			sendTo(t, c.js, "hang.x", "d7-bad", 750, uniform(10*time.Second))
			for i := 0; i < burst; i += 1000 { // in chunks: the client's own window of pending PubAcks is 1024
				sendTo(t, c.js, "hang.burst", "d7-burst"+strconv.Itoa(i), min(1000, burst-i), func(int) time.Duration { return 2 * time.Second })
			}
			r := c.await(seqs, 40*time.Second)
			requireSafe(t, r)
			p50, p99, max := l.quantiles()
			stored := streamMsgs(t, s.js, "HANG")
			t.Logf("D7 (burst %d): healthy target %s; lateness after x-delay-due (egress alone): p50 %s p99 %s max %s; the hanging stream stored %d unacknowledged publishes",
				burst, r, p50, p99, max, stored)
			if p99 >= time.Second {
				t.Fatalf("healthy target p99 lateness %s beside a hanging target, want < 1s (issue 12: <= 50 ms)", p99)
			}
			if stored == 0 {
				t.Fatal("the hanging stream got nothing: the row did not hang anything")
			}
		})
	}
}

// D8: a message that its target and the dead-letter subject both refuse as too large (a
// target stream and a dead-letter stream with max_msg_size 1 KiB, a 4 KiB payload) is
// dead-lettered once, after one attempt, without its payload (x-delay-original-size,
// x-delay-error and its headers kept), and leaves the store: never retried forever. Before
// issue 12 it was retried every BRIDGE_RETRY_BACKOFF x 2^n, for ever.
func TestD8DeadLetterTooLarge(t *testing.T) {
	s := newStack(t)
	createStream(t, s.js, jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"small.>"}, MaxMsgSize: 1024})
	createStream(t, s.js, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"delay.dlq"}, MaxMsgSize: 1024})
	b := e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_RETRY_BACKOFF", "100ms"))
	const n = 20
	for i := range n {
		m := nats.NewMsg("delay.in")
		m.Header.Set("x-target", "small.x")
		m.Header.Set("seq", "d8-"+strconv.Itoa(i))
		m.Data = []byte(strings.Repeat("x", 4096))
		if _, err := s.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for streamMsgs(t, s.js, "DLQ") < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // room for a second copy, if any
	got := readStream(t, s.js, "DLQ")
	stats := parked(t, b)
	t.Logf("D8: %d of %d dead-lettered; store %s", len(got), n, stats)
	seen := map[string]bool{}
	for _, m := range got {
		seq := m.Headers().Get("seq")
		reason := m.Headers().Get("x-delay-error")
		if seen[seq] || len(m.Data()) != 0 || m.Headers().Get("x-delay-original-size") != "4096" || !strings.HasPrefix(reason, "too_large:") {
			t.Fatalf("dead letter %s: twice %v, payload %d bytes, x-delay-original-size %q, x-delay-error %q",
				seq, seen[seq], len(m.Data()), m.Headers().Get("x-delay-original-size"), reason)
		}
		seen[seq] = true
	}
	if len(got) != n || !strings.HasPrefix(stats, `{"parked":0`) {
		t.Fatalf("want %d dead letters without payload and an empty store, got %d, store %s", n, len(got), stats)
	}
}

// lateness records, for the first copy of each seq on a subject, the arrival time minus
// its x-delay-due: the lateness egress is responsible for (the checker's lateness also
// counts the time the message took to reach the bridge).
type lateness struct {
	mu   sync.Mutex
	seen map[string]bool
	l    []time.Duration
}

func watchLateness(t *testing.T, nc *nats.Conn, subject string) *lateness {
	t.Helper()
	l := &lateness{seen: map[string]bool{}}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		now := time.Now()
		due, err := strconv.ParseInt(m.Header.Get("x-delay-due"), 10, 64)
		l.mu.Lock()
		defer l.mu.Unlock()
		if seq := m.Header.Get("seq"); err == nil && !l.seen[seq] {
			l.seen[seq] = true
			l.l = append(l.l, now.Sub(time.UnixMilli(due)))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

func (l *lateness) quantiles() (p50, p99, max time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.Clone(l.l)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0, 0
	}
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)], s[len(s)-1]
}

// readStream returns every message stream holds.
func readStream(t *testing.T, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := streamMsgs(t, js, stream)
	var out []jetstream.Msg
	for len(out) < want {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("read %s: %v after %d of %d", stream, err, len(out), want)
		}
		out = append(out, m)
	}
	return out
}
