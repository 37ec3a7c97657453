//go:build fault

// Package fault is the fault suite of docs/faults.md: the bridge binary, built with
// test-only failpoints (-tags failpoints), runs as a subprocess against a spawned
// redis-server and an embedded nats-server, and is killed, stopped and restarted while
// messages flow. A checker counts, for every run, the messages lost (acked by the source,
// never delivered), early (before their due time), duplicated and late.
//
// Run with `make test-fault` (go test -tags fault ./e2e/fault/).
package fault

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testnats"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// bridgeBin is the failpoints build of the bridge, made once by TestMain.
var bridgeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "delaybridge-fault-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		os.Exit(1)
	}
	if bridgeBin, err = e2etest.Build(dir, false, "failpoints"); err != nil {
		fmt.Fprintln(os.Stderr, "fault: build bridge:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stack is one test's servers: Redis (AOF always unless args say otherwise), NATS with
// the streams IN (delay.in, delay.cancel: the bridge's durable consumer reads it) and OUT
// (out.>: every delivery is a JetStream publish, deduplicated by Nats-Msg-Id).
type stack struct {
	redis *testredis.Server
	nats  *testnats.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	env   map[string]string
}

func newStack(t *testing.T, redisArgs ...string) *stack {
	t.Helper()
	s := newNATSStack(t)
	s.redis = testredis.Start(t, redisArgs...)
	s.env["BRIDGE_REDIS_URL"] = s.redis.URL()
	return s
}

// newNATSStack is the stack without Redis: an embedded nats-server (with natsOpts) with
// the streams IN and OUT, and the bridge's environment without a Redis setting.
func newNATSStack(t *testing.T, natsOpts ...func(*server.Options)) *stack {
	t.Helper()
	s := &stack{nats: testnats.Start(t, natsOpts...)}
	s.nc = testnats.Connect(t, s.nats.URL())
	var err error
	if s.js, err = jetstream.New(s.nc); err != nil {
		t.Fatal(err)
	}
	testnats.CreateStream(t, s.nc, "IN", "delay.in", "delay.cancel")
	testnats.CreateStream(t, s.nc, "OUT", "out.>")
	s.env = map[string]string{
		"BRIDGE_NATS_URL":         s.nats.URL(),
		"BRIDGE_NATS_STREAM":      "IN",
		"BRIDGE_NATS_ACK_WAIT":    "2s",
		"BRIDGE_LEASE":            "1s",
		"BRIDGE_KEY_PREFIX":       testredis.Prefix(t),
		"BRIDGE_LOG_LEVEL":        "info",
		"BRIDGE_LOG_FORMAT":       "text",
		"BRIDGE_SHUTDOWN_TIMEOUT": "10s",
	}
	return s
}

// envWith is a copy of s.env with kv (key, value, key, value...) set.
func (s *stack) envWith(kv ...string) map[string]string {
	env := make(map[string]string, len(s.env)+len(kv)/2)
	for k, v := range s.env {
		env[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

// checker sends numbered messages to delay.in and watches out.fault with a core
// subscription (which sees every publish, duplicates included) and the OUT stream (which
// holds what JetStream kept after Nats-Msg-Id deduplication).
type checker struct {
	t  *testing.T
	s  *stack
	js jetstream.JetStream // its own connection, so that async publish state is ours
	arrivals
}

func newChecker(t *testing.T, s *stack) *checker {
	t.Helper()
	c := &checker{t: t, s: s, arrivals: newArrivals()}
	nc := testnats.Connect(t, s.nats.URL())
	var err error
	if c.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024)); err != nil {
		t.Fatal(err)
	}
	sub, err := s.nc.Subscribe("out.fault", c.arrive)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

func (c *checker) arrive(m *nats.Msg) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arrivedLocked(m.Header.Get("seq"), m.Header.Get("x-delay-due"), now)
}

// send publishes n messages, message i with x-delay delay(i), and waits for every PubAck:
// from then on each one is the bridge's to deliver. It returns the seqs.
func (c *checker) send(prefix string, n int, delay func(i int) time.Duration) []string {
	c.t.Helper()
	seqs := make([]string, n)
	for i := range n {
		seqs[i] = c.publishOne(fmt.Sprintf("%s-%d", prefix, i), delay(i), nil)
	}
	select {
	case <-c.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		c.t.Fatal("PubAcks for delay.in did not arrive")
	}
	return seqs
}

// publishOne publishes one message to delay.in (x-delay d, target out.fault, header seq)
// without waiting for its PubAck, and records the earliest moment it may arrive. It
// returns seq.
func (c *checker) publishOne(seq string, d time.Duration, body []byte) string {
	c.t.Helper()
	m := nats.NewMsg("delay.in")
	m.Header.Set("x-delay", strconv.FormatInt(d.Milliseconds(), 10))
	m.Header.Set("x-target", "out.fault")
	m.Header.Set("seq", seq)
	m.Data = body
	c.expect(seq, d)
	if _, err := c.js.PublishMsgAsync(m); err != nil {
		c.t.Fatalf("publish %s: %v", seq, err)
	}
	return seq
}

// report is what the checker counted for one run.
type report struct {
	messages, lost, early, dups, streamExtra int
	p50, p99, max                            time.Duration
}

func (r report) String() string {
	return fmt.Sprintf("messages %d, lost %d, early %d, duplicate publishes %d (OUT stream extra copies %d), lateness p50 %s p99 %s max %s",
		r.messages, r.lost, r.early, r.dups, r.streamExtra, r.p50, r.p99, r.max)
}

// await waits up to timeout for every seq to arrive, then 1.5 s more for late copies, and
// counts. The OUT stream must hold one message per seq: extra ones are duplicates that
// escaped JetStream's deduplication.
func (c *checker) await(seqs []string, timeout time.Duration) report {
	c.t.Helper()
	c.waitAll(seqs, timeout)
	time.Sleep(1500 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := report{messages: len(seqs), early: len(c.early)}
	r.lost, r.dups = c.lostDupsLocked(seqs)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	str, err := c.s.js.Stream(ctx, "OUT")
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	r.streamExtra = int(info.State.Msgs) - (len(seqs) - r.lost)
	if l := c.sortedLatenessLocked(); len(l) > 0 {
		r.p50, r.p99, r.max = l[len(l)/2], l[min(len(l)-1, len(l)*99/100)], l[len(l)-1]
	}
	c.reportEarlyLocked(c.t)
	return r
}

// requireSafe fails the test unless nothing was lost and nothing was early: the promise
// of docs/faults.md. Duplicates are allowed (at-least-once) and reported. Extra copies in the
// OUT stream are duplicates JetStream could not drop (a new Nats-Msg-Id): a source message
// redelivered after its tombstone expired (BRIDGE_TOMBSTONE_TTL), or one parked again by a
// row that asserts nothing about them; requireNoReparks asserts 0.
func requireSafe(t *testing.T, r report) {
	t.Helper()
	t.Log(r)
	if r.lost != 0 || r.early != 0 {
		t.Fatalf("guarantee broken: %s", r)
	}
}

// parked returns the bridge's parked count from the message API.
func parked(t *testing.T, b *e2etest.Bridge) string {
	t.Helper()
	code, body := e2etest.HTTPGet("http://" + b.APIAddr + "/v1/stats")
	if code != 200 {
		t.Fatalf("/v1/stats: %d %s", code, body)
	}
	return body
}

// uniform is a delay uniform-ish in 0..max, deterministic in i.
func uniform(max time.Duration) func(int) time.Duration {
	return func(i int) time.Duration { return time.Duration(i*7919%1000) * max / 1000 }
}
