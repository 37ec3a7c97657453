package nats_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/broker"
	wmnats "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

const waitFor = 10 * time.Second

// env is one embedded server with a stream "S" capturing "js.>"; subjects "core.>" are
// captured by no stream.
type env struct {
	srv *testnats.Server
	nc  *natsgo.Conn // the test's own (raw) connection
	js  jetstream.JetStream
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testnats.Start(t)
	nc := testnats.Connect(t, srv.URL())
	testnats.CreateStream(t, nc, "S", "js.>")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, nc: nc, js: js}
}

func (e *env) publisher(t *testing.T, cfg wmnats.PublisherConfig) *wmnats.Publisher {
	t.Helper()
	p, err := wmnats.NewPublisher(testnats.Connect(t, e.srv.URL()), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (e *env) subscriber(t *testing.T, cfg wmnats.SubscriberConfig) *wmnats.Subscriber {
	t.Helper()
	s, err := wmnats.NewSubscriber(testnats.Connect(t, e.srv.URL()), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (e *env) subscribe(t *testing.T, cfg wmnats.SubscriberConfig, topic string) (*wmnats.Subscriber, <-chan *message.Message) {
	t.Helper()
	s := e.subscriber(t, cfg)
	ch, err := s.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	return s, ch
}

func (e *env) streamMsgs(t *testing.T, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := e.js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("channel closed, want a message")
		}
		return m
	case <-time.After(waitFor):
		t.Fatal("no message within 10s")
	}
	return nil
}

func expectClosed(t *testing.T, ch <-chan *message.Message) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel not closed within 10s")
		}
	}
}

// modes are the two ways a topic is consumed: through stream S, or core.
var modes = []struct {
	name, prefix string
	cfg          wmnats.SubscriberConfig
}{
	{"core", "core.", wmnats.SubscriberConfig{}},
	{"jetstream", "js.", wmnats.SubscriberConfig{Stream: "S"}},
}

// A foreign producer's message with a repeated header must arrive in order, with names
// in their case, and with Nats-Msg-Id as the UUID. (watermill-nats panics on it.) Its
// headers with the reserved prefix stay headers (intake refuses them), never the
// adapter's metadata.
func TestRepeatedHeadersFromTheWire(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			topic := mode.prefix + "repeat"
			_, ch := e.subscribe(t, mode.cfg, topic)

			m := natsgo.NewMsg(topic)
			m.Header["x"] = []string{"1", "2"}
			m.Header["X-Mixed-Case"] = []string{"v"}
			m.Header["Nats-Msg-Id"] = []string{"id-1"}
			m.Header[headers.MetaReply] = []string{"spoofed"}     // never taken from the wire
			m.Header[headers.MetaSourceID] = []string{"js:X:666"} // never taken from the wire
			m.Header[headers.MetaRequest] = []string{"1"}         // never taken from the wire
			m.Header[headers.MetaSourceTime] = []string{"1"}      // never taken from the wire
			m.Data = []byte("payload")
			sent := time.Now()
			if err := e.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}

			got := next(t, ch)
			defer got.Ack()
			if got.UUID != "id-1" {
				t.Errorf("UUID = %q, want id-1", got.UUID)
			}
			if string(got.Payload) != "payload" {
				t.Errorf("payload = %q", got.Payload)
			}
			list := headers.FromMetadata(got.Metadata)
			if v := list.Values("x"); !slices.Equal(v, []string{"1", "2"}) {
				t.Errorf("x = %v, want [1 2]", v)
			}
			if got.Metadata["X-Mixed-Case"] != "v" {
				t.Errorf("metadata %v lacks X-Mixed-Case as sent", got.Metadata)
			}
			if _, ok := list.Get(wmnats.MsgIDHeader); ok {
				t.Errorf("Nats-Msg-Id in metadata: %v", got.Metadata)
			}
			if got.Metadata[headers.MetaReply] != "" || got.Metadata[headers.MetaRequest] != "" {
				t.Errorf("reserved reply or request key taken from the wire: %v", got.Metadata)
			}
			if v, _ := list.Get(headers.MetaSourceID); v != "js:X:666" {
				t.Errorf("the producer's %s header lost: %v", headers.MetaSourceID, list)
			}
			wantSource := ""
			if mode.name == "jetstream" {
				wantSource = "js:S:1"
			}
			if s := got.Metadata[headers.MetaSourceID]; s != wantSource {
				t.Errorf("source id = %q, want %q", s, wantSource)
			}
			// JetStream: the message time (the server's, unix ms); core NATS has none.
			st, err := strconv.ParseInt(got.Metadata[headers.MetaSourceTime], 10, 64)
			switch {
			case mode.name != "jetstream" && got.Metadata[headers.MetaSourceTime] != "":
				t.Errorf("core message with a source time: %v", got.Metadata)
			case mode.name == "jetstream" && (err != nil || st < sent.UnixMilli()-1000 || st > time.Now().UnixMilli()+1000):
				t.Errorf("source time = %q, want the message time near %d", got.Metadata[headers.MetaSourceTime], sent.UnixMilli())
			}
		})
	}
}

// Repeated headers set in metadata go on the wire in order, reserved keys do not, and
// Nats-Msg-Id is the UUID; a subscriber of the adapter gets them back.
func TestRepeatedHeadersRoundTrip(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			topic := mode.prefix + "roundtrip"
			raw, err := e.nc.SubscribeSync(topic)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			_, ch := e.subscribe(t, mode.cfg, topic)

			in := headers.List{{Key: "x", Value: "1"}, {Key: "X-Mixed-Case", Value: "v"}, {Key: "x", Value: "2"}}
			msg := message.NewMessage(watermill.NewUUID(), []byte("p"))
			msg.Metadata = headers.ToMetadata(in, map[string]string{headers.MetaReply: "r", headers.MetaSourceID: "js:S:9"})
			msg.Metadata["Nats-Msg-Id"] = "not-the-uuid"
			if err := e.publisher(t, wmnats.PublisherConfig{}).Publish(topic, msg); err != nil {
				t.Fatalf("publish: %v", err)
			}

			wire, err := raw.NextMsg(waitFor)
			if err != nil {
				t.Fatal(err)
			}
			if v := wire.Header["x"]; !slices.Equal(v, []string{"1", "2"}) {
				t.Errorf("wire x = %v, want [1 2]", v)
			}
			if v := wire.Header["X-Mixed-Case"]; !slices.Equal(v, []string{"v"}) {
				t.Errorf("wire X-Mixed-Case = %v", v)
			}
			if v := wire.Header["Nats-Msg-Id"]; !slices.Equal(v, []string{msg.UUID}) {
				t.Errorf("wire Nats-Msg-Id = %v, want [%s]", v, msg.UUID)
			}
			for k := range wire.Header {
				if strings.HasPrefix(strings.ToLower(k), headers.ReservedPrefix) {
					t.Errorf("reserved key %q on the wire", k)
				}
			}

			got := next(t, ch)
			got.Ack()
			if got.UUID != msg.UUID {
				t.Errorf("UUID = %q, want %q", got.UUID, msg.UUID)
			}
			if v := headers.FromMetadata(got.Metadata).Values("x"); !slices.Equal(v, []string{"1", "2"}) {
				t.Errorf("x after round trip = %v", v)
			}
		})
	}
}

func TestCoreRequestGetsReplyOnAck(t *testing.T) {
	e := newEnv(t)
	_, ch := e.subscribe(t, wmnats.SubscriberConfig{}, "core.req")

	type result struct {
		m   *natsgo.Msg
		err error
	}
	res := make(chan result, 1)
	go func() {
		m, err := e.nc.Request("core.req", []byte("q"), waitFor)
		res <- result{m, err}
	}()
	got := next(t, ch)
	if got.Metadata.Get(headers.MetaRequest) != "1" {
		t.Fatalf("a core request without %s", headers.MetaRequest)
	}
	got.Metadata.Set(headers.MetaReply, `{"id":"a","due":1}`)
	got.Ack()
	r := <-res
	if r.err != nil {
		t.Fatalf("request: %v", r.err)
	}
	if string(r.m.Data) != `{"id":"a","due":1}` {
		t.Fatalf("reply = %q", r.m.Data)
	}

	// Nack sends nothing: the requester times out.
	go func() {
		m, err := e.nc.Request("core.req", []byte("q"), 300*time.Millisecond)
		res <- result{m, err}
	}()
	got = next(t, ch)
	got.Metadata.Set(headers.MetaReply, "never")
	got.Nack()
	if r := <-res; !errors.Is(r.err, natsgo.ErrTimeout) {
		t.Fatalf("request after nack: %v, want timeout", r.err)
	}
}

func TestJetStreamNackRedelivers(t *testing.T) {
	e := newEnv(t)
	_, ch := e.subscribe(t, wmnats.SubscriberConfig{Stream: "S"}, "js.nack")
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	if err := e.publisher(t, wmnats.PublisherConfig{}).Publish("js.nack", msg); err != nil {
		t.Fatal(err)
	}
	first := next(t, ch)
	first.Nack()
	again := next(t, ch) // AckWait is 30s: only the Nak can bring it back this soon
	again.Ack()
	if again.UUID != msg.UUID || again.Metadata[headers.MetaSourceID] != first.Metadata[headers.MetaSourceID] {
		t.Fatalf("redelivered %s %v, want %s with source %q", again.UUID, again.Metadata, msg.UUID, first.Metadata[headers.MetaSourceID])
	}
}

func TestMissingStream(t *testing.T) {
	e := newEnv(t)
	s := e.subscriber(t, wmnats.SubscriberConfig{Stream: "NOPE"})
	_, err := s.Subscribe(context.Background(), "js.x")
	if !errors.Is(err, wmnats.ErrStreamNotFound) {
		t.Fatalf("err = %v, want ErrStreamNotFound", err)
	}
	if want := `jetstream stream "NOPE" not found: the bridge never creates streams`; !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q, want it to contain %q", err, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := e.js.Stream(ctx, "NOPE"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream NOPE exists after subscribe (err %v)", err)
	}
}

func TestJetStreamConsumerConfig(t *testing.T) {
	e := newEnv(t)
	cfg := wmnats.SubscriberConfig{Stream: "S", AckWait: 7 * time.Second, MaxAckPending: 42}
	e.subscribe(t, cfg, "js.orders.*")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := e.js.Consumer(ctx, "S", "js_orders__")
	if err != nil {
		t.Fatalf("consumer js_orders__: %v", err)
	}
	got := c.CachedInfo().Config
	if got.Durable != "js_orders__" || got.FilterSubject != "js.orders.*" || got.AckPolicy != jetstream.AckExplicitPolicy ||
		got.AckWait != 7*time.Second || got.MaxAckPending != 42 {
		t.Fatalf("consumer config = %+v", got)
	}
}

// A stream that does not capture the topic means a core subscription, and no consumer.
func TestStreamNotCapturingTopicIsCore(t *testing.T) {
	e := newEnv(t)
	_, ch := e.subscribe(t, wmnats.SubscriberConfig{Stream: "S"}, "core.plain")
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	if err := e.publisher(t, wmnats.PublisherConfig{}).Publish("core.plain", msg); err != nil {
		t.Fatal(err)
	}
	if got := next(t, ch); got.UUID != msg.UUID || got.Metadata[headers.MetaSourceID] != "" {
		t.Fatalf("got %s %v", got.UUID, got.Metadata)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := e.js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Consumers; n != 0 {
		t.Fatalf("stream S has %d consumers, want 0", n)
	}
}

func TestJetStreamPublishDeduplicates(t *testing.T) {
	e := newEnv(t)
	pub := e.publisher(t, wmnats.PublisherConfig{})
	id := watermill.NewUUID()
	// Same UUID: within one call and across calls.
	if err := pub.Publish("js.dedup", message.NewMessage(id, []byte("a")), message.NewMessage(id, []byte("b"))); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("js.dedup", message.NewMessage(id, []byte("c"))); err != nil {
		t.Fatal(err)
	}
	if n := e.streamMsgs(t, "S"); n != 1 {
		t.Fatalf("stream has %d messages, want 1", n)
	}
}

func TestCorePublishAndQueueGroup(t *testing.T) {
	e := newEnv(t)
	// Two subscribers in one queue group share the messages; one in another group gets all.
	_, a := e.subscribe(t, wmnats.SubscriberConfig{}, "core.q")
	_, b := e.subscribe(t, wmnats.SubscriberConfig{}, "core.q")
	_, other := e.subscribe(t, wmnats.SubscriberConfig{Queue: "other"}, "core.q")

	var msgs []*message.Message
	for range 50 {
		msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte("x")))
	}
	if err := e.publisher(t, wmnats.PublisherConfig{}).Publish("core.q", msgs...); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range msgs {
		select {
		case m := <-a:
			seen[m.UUID]++
			m.Ack()
		case m := <-b:
			seen[m.UUID]++
			m.Ack()
		case <-time.After(waitFor):
			t.Fatalf("group got %d of %d", len(seen), len(msgs))
		}
	}
	for _, m := range msgs {
		if seen[m.UUID] != 1 {
			t.Fatalf("message %s seen %d times in the group", m.UUID, seen[m.UUID])
		}
		got := next(t, other)
		got.Ack()
	}
}

// One message the stream rejects (too large) fails alone; the others are stored.
func TestPublishErrorPerMessage(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"small.>"}, MaxMsgSize: 512}); err != nil {
		t.Fatal(err)
	}
	ok1 := message.NewMessage(watermill.NewUUID(), []byte("fits"))
	big := message.NewMessage(watermill.NewUUID(), bytes.Repeat([]byte("x"), 2048))
	ok2 := message.NewMessage(watermill.NewUUID(), []byte("fits too"))
	err := e.publisher(t, wmnats.PublisherConfig{}).Publish("small.x", ok1, big, ok2)

	var perr *broker.PublishError
	if !errors.As(err, &perr) {
		t.Fatalf("err = %v, want *PublishError", err)
	}
	failed := perr.FailedMessages()
	if len(failed) != 1 || failed[big.UUID] == nil {
		t.Fatalf("failed = %v, want only %s", failed, big.UUID)
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("cause %v is not a JetStream API error", failed[big.UUID])
	}
	var rej *broker.RejectedError
	if !errors.As(failed[big.UUID], &rej) || rej.Reason != contract.ReasonTooLarge {
		t.Fatalf("cause %v is not a too_large rejection (the stream's max_msg_size: retrying cannot help)", failed[big.UUID])
	}
	if !strings.Contains(err.Error(), "1 of 3") {
		t.Fatalf("Error() = %q, want a 1 of 3 summary", err)
	}
	if n := e.streamMsgs(t, "SMALL"); n != 2 {
		t.Fatalf("stream has %d messages, want 2", n)
	}
}

func TestPublishHonoursMessageContext(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			live := message.NewMessage(watermill.NewUUID(), []byte("x"))
			dead := message.NewMessage(watermill.NewUUID(), []byte("x"))
			dead.SetContext(ctx)
			err := e.publisher(t, wmnats.PublisherConfig{}).Publish(mode.prefix+"ctx", live, dead)
			var perr *broker.PublishError
			if !errors.As(err, &perr) || len(perr.FailedMessages()) != 1 || !errors.Is(perr.FailedMessages()[dead.UUID], context.Canceled) {
				t.Fatalf("err = %v, want only %s failed with context.Canceled", err, dead.UUID)
			}
		})
	}
}

// Subjects with no stream on a server without JetStream are core.
func TestPublishWithoutJetStream(t *testing.T) {
	srv := testnats.Start(t, func(o *server.Options) { o.JetStream = false })
	nc := testnats.Connect(t, srv.URL())
	raw, err := nc.SubscribeSync("plain")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pub, err := wmnats.NewPublisher(testnats.Connect(t, srv.URL()), wmnats.PublisherConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("plain", message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if _, err := raw.NextMsg(waitFor); err != nil {
		t.Fatal(err)
	}
}

func TestPublisherClose(t *testing.T) {
	e := newEnv(t)
	pub := e.publisher(t, wmnats.PublisherConfig{})
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err := pub.Publish("core.x", message.NewMessage(watermill.NewUUID(), nil))
	if !errors.Is(err, wmnats.ErrClosed) {
		t.Fatalf("Publish after Close = %v, want ErrClosed", err)
	}
}

// Closing with messages in flight: no panic, the channel closes, and JetStream messages
// handed out but not acked are not acked: a new subscriber gets them again.
func TestCloseWithMessagesInFlight(t *testing.T) {
	t.Run("jetstream", func(t *testing.T) {
		e := newEnv(t)
		cfg := wmnats.SubscriberConfig{Stream: "S", AckWait: time.Second}
		pub := e.publisher(t, wmnats.PublisherConfig{})
		var want []string
		for range 10 {
			m := message.NewMessage(watermill.NewUUID(), []byte("x"))
			want = append(want, m.UUID)
			if err := pub.Publish("js.inflight", m); err != nil {
				t.Fatal(err)
			}
		}
		sub, ch := e.subscribe(t, cfg, "js.inflight")
		var held []*message.Message
		for range 3 {
			held = append(held, next(t, ch))
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, ch)
		expectNoGoroutinesOf(t, sub)
		if err := sub.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		for _, m := range held {
			select {
			case <-m.Context().Done():
			default:
				t.Fatal("message context not cancelled by Close")
			}
			m.Ack() // after Close: no effect, no panic
		}
		if _, err := sub.Subscribe(context.Background(), "js.inflight"); !errors.Is(err, wmnats.ErrClosed) {
			t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
		}

		_, ch2 := e.subscribe(t, cfg, "js.inflight")
		got := map[string]bool{}
		for len(got) < len(want) {
			m := next(t, ch2)
			got[m.UUID] = true
			m.Ack()
		}
		for _, m := range held {
			if !got[m.UUID] {
				t.Fatalf("held message %s not redelivered", m.UUID)
			}
		}
	})
	t.Run("core", func(t *testing.T) {
		e := newEnv(t)
		sub, ch := e.subscribe(t, wmnats.SubscriberConfig{}, "core.inflight")
		pub := e.publisher(t, wmnats.PublisherConfig{})
		for range 10 {
			if err := pub.Publish("core.inflight", message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
				t.Fatal(err)
			}
		}
		held := next(t, ch)
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, ch)
		expectNoGoroutinesOf(t, sub)
		held.Ack()
	})
}

func TestSubscribeContextCancelClosesChannel(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.subscriber(t, mode.cfg)
			ctx, cancel := context.WithCancel(context.Background())
			ch, err := s.Subscribe(ctx, mode.prefix+"cancel")
			if err != nil {
				t.Fatal(err)
			}
			msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
			if err := e.publisher(t, wmnats.PublisherConfig{}).Publish(mode.prefix+"cancel", msg); err != nil {
				t.Fatal(err)
			}
			held := next(t, ch)
			cancel()
			expectClosed(t, ch)
			// A message handed out before the cancel can still be acked.
			held.Ack()
			if mode.name == "jetstream" {
				pollConsumerAcked(t, e, "S", "js_cancel", 1)
			}
		})
	}
}

func pollConsumerAcked(t *testing.T, e *env, stream, consumer string, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		c, err := e.js.Consumer(ctx, stream, consumer)
		if err == nil && c.CachedInfo().AckFloor.Stream >= seq {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("consumer %s ack floor below %d", consumer, seq)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// The JetStream subscription survives a server restart, and so do the stream's messages.
func TestResumeAfterServerRestart(t *testing.T) {
	e := newEnv(t)
	_, ch := e.subscribe(t, wmnats.SubscriberConfig{Stream: "S"}, "js.restart")
	pub := e.publisher(t, wmnats.PublisherConfig{})
	first := message.NewMessage(watermill.NewUUID(), []byte("1"))
	if err := pub.Publish("js.restart", first); err != nil {
		t.Fatal(err)
	}
	next(t, ch).Ack()
	pollConsumerAcked(t, e, "S", "js_restart", 1)

	e.srv.Restart(t)

	second := message.NewMessage(watermill.NewUUID(), []byte("2"))
	deadline := time.Now().Add(waitFor)
	for err := pub.Publish("js.restart", second); err != nil; err = pub.Publish("js.restart", second) {
		if time.Now().After(deadline) {
			t.Fatalf("publish after restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := next(t, ch)
	got.Ack()
	if got.UUID != second.UUID {
		t.Fatalf("after restart got %s, want %s", got.UUID, second.UUID)
	}
}

func TestConnect(t *testing.T) {
	srv := testnats.Start(t)
	nc, err := wmnats.Connect(context.Background(), srv.URL(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	nc2, err := wmnats.Connect(ctx, srv.URL(), "test", nil)
	switch {
	case err == nil: // the dial may win the race with the cancelled context
		nc2.Close()
	case !errors.Is(err, context.Canceled):
		t.Fatalf("Connect with cancelled ctx: %v", err)
	}
}

// expectNoGoroutinesOf fails when a goroutine of sub is still running (Close waits for
// them all).
func expectNoGoroutinesOf(t *testing.T, sub *wmnats.Subscriber) {
	t.Helper()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	receiver := fmt.Sprintf("(%p", sub) // a method frame prints its receiver first
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "broker/nats.(*Subscriber).") && strings.Contains(g, receiver) {
			t.Fatalf("subscriber goroutine left after Close:\n%s", g)
		}
	}
}

// A consumer deleted under a running subscription is created again, and consumption
// goes on.
func TestJetStreamConsumerDeletedIsRecreated(t *testing.T) {
	e := newEnv(t)
	_, ch := e.subscribe(t, wmnats.SubscriberConfig{Stream: "S"}, "js.deleted")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// Delete it while a pull request waits, so that the server tells the subscription.
	// (Deleted between pulls, it is noticed by missing heartbeats, after up to 10s.)
	for {
		c, err := e.js.Consumer(ctx, "S", "js_deleted")
		if err != nil {
			t.Fatal(err)
		}
		if c.CachedInfo().NumWaiting > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.js.DeleteConsumer(ctx, "S", "js_deleted"); err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	if err := e.publisher(t, wmnats.PublisherConfig{}).Publish("js.deleted", msg); err != nil {
		t.Fatal(err)
	}
	got := next(t, ch)
	got.Ack()
	if got.UUID != msg.UUID {
		t.Fatalf("got %s, want %s", got.UUID, msg.UUID)
	}
}

// A header name NATS cannot carry fails its message only.
func TestPublishInvalidHeaderFailsAlone(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			good := message.NewMessage(watermill.NewUUID(), []byte("x"))
			bad := message.NewMessage(watermill.NewUUID(), []byte("x"))
			bad.Metadata.Set("bad:key", "v")
			err := e.publisher(t, wmnats.PublisherConfig{}).Publish(mode.prefix+"hdr", good, bad)
			var perr *broker.PublishError
			if !errors.As(err, &perr) {
				t.Fatalf("err = %v, want *PublishError", err)
			}
			if f := perr.FailedMessages(); len(f) != 1 || !errors.Is(f[bad.UUID], natsgo.ErrBadHeaderMsg) {
				t.Fatalf("failed = %v, want only %s with ErrBadHeaderMsg", f, bad.UUID)
			}
		})
	}
}

// A stream that stores but never acknowledges (NoAck) holds more publishes than nats.go's
// window of pending acknowledgements (4,000 by default); publishes to another stream
// through the same publisher still complete at once instead of stalling behind it.
func TestHangingStreamDoesNotStallOthers(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "HANG", Subjects: []string{"hang.>"}, NoAck: true}); err != nil {
		t.Fatal(err)
	}
	pub := e.publisher(t, wmnats.PublisherConfig{PublishTimeout: 4 * time.Second})
	const stuck = 4100
	hung := make(chan error, 1)
	go func() {
		msgs := make([]*message.Message, stuck)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), []byte("x"))
		}
		hung <- pub.Publish("hang.x", msgs...)
	}()
	// The hanging stream stores what it gets: wait until the window is full.
	deadline := time.Now().Add(waitFor)
	for e.streamMsgs(t, "HANG") < 4000 {
		if time.Now().After(deadline) {
			t.Fatalf("HANG holds %d messages, want 4000", e.streamMsgs(t, "HANG"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	err := pub.Publish("js.ok", message.NewMessage(watermill.NewUUID(), []byte("ok")))
	took := time.Since(start)
	t.Logf("publish to a healthy stream beside %d unacknowledged: %s (%v)", stuck, took, err)
	if err != nil || took > time.Second {
		t.Fatalf("healthy publish took %s: %v", took, err)
	}
	if err := <-hung; err == nil {
		t.Fatal("publishes to a stream that never acknowledges succeeded")
	}
}

// PublishList (egress's fast path) reports as Publish does: a failed message by its ID in
// a PublishError (a bad header name fails alone), every message failed when ctx is done,
// ErrClosed after Close.
func TestPublishList(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			pub := e.publisher(t, wmnats.PublisherConfig{})
			good := headers.Message{ID: watermill.NewUUID(), Headers: headers.List{{Key: "a", Value: "1"}}, Payload: []byte("x")}
			bad := headers.Message{ID: watermill.NewUUID(), Headers: headers.List{{Key: "bad:key", Value: "v"}}, Payload: []byte("x")}
			err := pub.PublishList(context.Background(), mode.prefix+"list", []headers.Message{good, bad})
			var perr *broker.PublishError
			if !errors.As(err, &perr) {
				t.Fatalf("err = %v, want *PublishError", err)
			}
			if f := perr.FailedMessages(); len(f) != 1 || !errors.Is(f[bad.ID], natsgo.ErrBadHeaderMsg) {
				t.Fatalf("failed = %v, want only %s with ErrBadHeaderMsg", f, bad.ID)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err = pub.PublishList(ctx, mode.prefix+"list", []headers.Message{good})
			if !errors.As(err, &perr) || !errors.Is(perr.FailedMessages()[good.ID], context.Canceled) {
				t.Fatalf("err = %v, want %s failed with context.Canceled", err, good.ID)
			}
			if err := pub.Close(); err != nil {
				t.Fatal(err)
			}
			if err := pub.PublishList(context.Background(), mode.prefix+"list", []headers.Message{good}); !errors.Is(err, wmnats.ErrClosed) {
				t.Fatalf("PublishList after Close = %v, want ErrClosed", err)
			}
		})
	}
}

// Publishes awaiting their acknowledgements when the connection goes away fail at once
// with nats.ErrDisconnected (their PubAcks are lost with the connection), not after
// PublishTimeout: the caller retries promptly.
func TestPendingAcksFailOnDisconnect(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "HANG", Subjects: []string{"hang.>"}, NoAck: true}); err != nil {
		t.Fatal(err)
	}
	nc := testnats.Connect(t, e.srv.URL())
	pub, err := wmnats.NewPublisher(nc, wmnats.PublisherConfig{PublishTimeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	done := make(chan error, 1)
	go func() {
		done <- pub.PublishList(context.Background(), "hang.x", []headers.Message{{ID: "a", Payload: []byte("x")}, {ID: "b", Payload: []byte("y")}})
	}()
	deadline := time.Now().Add(waitFor)
	for e.streamMsgs(t, "HANG") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not get the messages")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	nc.Close()
	select {
	case err := <-done:
		var perr interface{ FailedMessages() map[string]error }
		if !errors.As(err, &perr) || !errors.Is(perr.FailedMessages()["a"], natsgo.ErrDisconnected) ||
			!errors.Is(perr.FailedMessages()["b"], natsgo.ErrDisconnected) {
			t.Fatalf("PublishList = %v, want both messages failed with ErrDisconnected", err)
		}
		t.Logf("failed %s after the connection closed", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("PublishList still waiting 10 s after its connection closed")
	}
}
