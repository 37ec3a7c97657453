package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// W3C trace context and baggage, as an instrumented producer sets them.
var traceHeaders = [][2]string{
	{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	{"tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
	{"baggage", "userId=alice,serverNode=DF%2028,isProduction=false"},
}

// compatNames are the compatibility headers; none may reach a target.
var compatNames = []string{"Nats-Schedule", "Nats-Schedule-Target", "scheduler-epoch", "scheduler-target-topic", "scheduler-target-key"}

// natsAt formats t as a Nats-Schedule value, to the millisecond.
func natsAt(t time.Time) string { return "@at " + t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// epochAfter is the first whole unix second at least d from now, as scheduler-epoch.
func epochAfter(d time.Duration) (string, int64) {
	sec := time.Now().Add(d + time.Second - 1).Unix()
	return strconv.FormatInt(sec, 10), sec * 1000
}

// TestCompatHeaders: a producer written for NATS message schedules or for
// kafka-message-scheduler, publishing to the bridge's ingress on NATS or on Kafka, gets its
// message delivered at the time and to the target (and record key) its headers name; the
// compatibility headers are not forwarded, and W3C trace context and baggage pass through
// unchanged on both brokers.
func TestCompatHeaders(t *testing.T) {
	s, cl := kafkaStack(t, true)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	for _, topic := range []string{"videos.online", "videos.from-nats"} {
		testkafka.CreateTopic(t, brokers, topic, 3)
	}
	// A JetStream stream on the dead-letter subject: it refuses Nats-Schedule, so a
	// rejected message carrying it must be dead-lettered with that header renamed.
	s.createStream(t, "COMPATDLQ", s.name("delay.dlq"))
	startBridge(t, s.env)

	// checkNATS checks a NATS arrival: not before due, at the due time asked for, trace
	// headers unchanged, no compatibility header.
	checkNATS := func(t *testing.T, a arrival, wantDue int64, payload string) {
		t.Helper()
		due, err := strconv.ParseInt(a.msg.Header.Get("x-delay-due"), 10, 64)
		if err != nil || due != wantDue {
			t.Fatalf("x-delay-due %q, want %d", a.msg.Header.Get("x-delay-due"), wantDue)
		}
		if late := a.at.Sub(time.UnixMilli(due)); late < 0 {
			t.Fatalf("delivered %s early", -late)
		} else {
			t.Logf("delivered %s after due", late)
		}
		if string(a.msg.Data) != payload {
			t.Fatalf("payload %q, want %q", a.msg.Data, payload)
		}
		for _, th := range traceHeaders {
			if got := a.msg.Header.Values(th[0]); len(got) != 1 || got[0] != th[1] {
				t.Fatalf("%s arrived as %q, want %q", th[0], got, th[1])
			}
		}
		for k := range a.msg.Header {
			for _, c := range compatNames {
				if strings.EqualFold(k, c) {
					t.Fatalf("compatibility header %s forwarded: %v", k, a.msg.Header)
				}
			}
		}
	}
	checkKafka := func(t *testing.T, r kafkaReceived, wantDue int64, payload, key string) {
		t.Helper()
		due, err := strconv.ParseInt(mustHeader(t, r.rec, "x-delay-due"), 10, 64)
		if err != nil || due != wantDue {
			t.Fatalf("x-delay-due %d (%v), want %d", due, err, wantDue)
		}
		if late := r.at.Sub(time.UnixMilli(due)); late < 0 {
			t.Fatalf("delivered %s early", -late)
		} else {
			t.Logf("delivered %s after due", late)
		}
		if string(r.rec.Value) != payload || string(r.rec.Key) != key {
			t.Fatalf("key %q payload %q, want %q %q", r.rec.Key, r.rec.Value, key, payload)
		}
		for _, th := range traceHeaders {
			if got := headerValues(r.rec, th[0]); len(got) != 1 || got[0] != th[1] {
				t.Fatalf("%s arrived as %q, want %q", th[0], got, th[1])
			}
		}
		for _, h := range r.rec.Headers {
			for _, c := range compatNames {
				if strings.EqualFold(h.Key, c) {
					t.Fatalf("compatibility header %s forwarded: %v", h.Key, r.rec.Headers)
				}
			}
		}
	}
	natsHeader := func(kv ...string) nats.Header {
		h := nats.Header{}
		for _, th := range traceHeaders {
			h.Set(th[0], th[1])
		}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	withTrace := func(kv ...string) []string {
		for _, th := range traceHeaders {
			kv = append(kv, th[0], th[1])
		}
		return kv
	}

	t.Run("Nats-Schedule on NATS", func(t *testing.T) {
		out := subscribe(t, s.nc, "orders.expire")
		at := time.Now().Add(800 * time.Millisecond).Truncate(time.Millisecond)
		reply := request(t, s.nc, s.name("delay.in"),
			natsHeader("Nats-Schedule", natsAt(at), "Nats-Schedule-Target", "orders.expire"), "order 1")
		if due, _ := reply["due"].(float64); int64(due) != at.UnixMilli() {
			t.Fatalf("reply %v, want due %d", reply, at.UnixMilli())
		}
		checkNATS(t, receive(t, out, 10*time.Second), at.UnixMilli(), "order 1")
	})

	t.Run("Nats-Schedule on Kafka", func(t *testing.T) {
		out := subscribe(t, s.nc, "orders.from-kafka")
		at := time.Now().Add(800 * time.Millisecond).Truncate(time.Millisecond)
		produce(t, cl, s.name("delay.in"), []byte("rk"), "order 2",
			withTrace("Nats-Schedule", natsAt(at), "Nats-Schedule-Target", "nats:orders.from-kafka")...)
		a := receive(t, out, 15*time.Second)
		checkNATS(t, a, at.UnixMilli(), "order 2")
		if k := a.msg.Header.Get("x-kafka-key"); k != "rk" {
			t.Fatalf("x-kafka-key %q, want the record key", k)
		}
	})

	t.Run("kafka-message-scheduler on Kafka", func(t *testing.T) {
		out := consume(t, brokers, "videos.online")
		// The schedule's record key is its identity: the second record with the same key
		// replaces the first, as in kafka-message-scheduler.
		oldEpoch, oldDue := epochAfter(3 * time.Second)
		produce(t, cl, s.name("delay.in"), []byte("vid1-online"), "old",
			withTrace("scheduler-epoch", oldEpoch, "scheduler-target-topic", "videos.online", "scheduler-target-key", "vid1")...)
		epoch, due := epochAfter(time.Second)
		if due >= oldDue {
			t.Fatalf("epoch %s not before %s", epoch, oldEpoch)
		}
		produce(t, cl, s.name("delay.in"), []byte("vid1-online"), "video 1",
			withTrace("scheduler-epoch", epoch, "scheduler-target-topic", "videos.online", "scheduler-target-key", "vid1", "customer-header", "dummy")...)
		r := receiveRecord(t, out, 15*time.Second)
		checkKafka(t, r, due, "video 1", "vid1")
		if id := mustHeader(t, r.rec, "x-delay-id"); id != "vid1-online" {
			t.Fatalf("x-delay-id %q, want the schedule's record key", id)
		}
		if v := mustHeader(t, r.rec, "customer-header"); v != "dummy" {
			t.Fatalf("customer-header %q", v)
		}
		wait := time.Until(time.UnixMilli(oldDue)) + 1500*time.Millisecond
		select {
		case r := <-out:
			t.Fatalf("replaced schedule delivered too: %q", r.rec.Value)
		case <-time.After(wait):
		}
	})

	t.Run("kafka-message-scheduler on NATS", func(t *testing.T) {
		out := consume(t, brokers, "videos.from-nats")
		epoch, due := epochAfter(time.Second)
		reply := request(t, s.nc, s.name("delay.in"), natsHeader("scheduler-epoch", epoch,
			"scheduler-target-topic", "kafka:videos.from-nats", "scheduler-target-key", "vid2"), "video 2")
		if got, _ := reply["due"].(float64); int64(got) != due {
			t.Fatalf("reply %v, want due %d", reply, due)
		}
		checkKafka(t, receiveRecord(t, out, 15*time.Second), due, "video 2", "vid2")
	})

	// docs/using.md's caveat ("Migrating from NATS schedules or kafka-message-scheduler"): a JetStream stream capturing the ingress subject acts on
	// Nats-Schedule itself, so the compatibility headers belong on the core subscription.
	// This pins the embedded nats-server's behaviour the caveat describes.
	t.Run("a JetStream ingress stream refuses Nats-Schedule", func(t *testing.T) {
		s.createStream(t, "COMPATIN", s.name("compat.js.in"))
		js, err := jetstream.New(s.nc)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(s.name("compat.js.in"))
		m.Header.Set("Nats-Schedule", natsAt(time.Now().Add(time.Minute)))
		m.Header.Set("Nats-Schedule-Target", "orders.expire")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := js.PublishMsg(ctx, m); err == nil {
			t.Fatal("the stream stored a Nats-Schedule message; the caveat of docs/using.md is out of date")
		} else {
			t.Logf("refused as documented: %v", err)
		}
	})

	t.Run("mixed with native headers goes to the dead-letter subject", func(t *testing.T) {
		dlq := subscribe(t, s.nc, s.name("delay.dlq"))
		reply := request(t, s.nc, s.name("delay.in"), natsHeader("x-delay", "1s", "Nats-Schedule", natsAt(time.Now()),
			"Nats-Schedule-Target", "orders.expire"), "mixed")
		if e, _ := reply["error"].(string); !strings.HasPrefix(e, "conflicting_schedule") {
			t.Fatalf("reply %v, want a conflicting_schedule error", reply)
		}
		// The reply came only after the stream confirmed the dead letter: the stream took
		// it, because Nats-* headers are renamed, not removed.
		a := receive(t, dlq, 10*time.Second)
		if e := a.msg.Header.Get("x-delay-error"); !strings.HasPrefix(e, "conflicting_schedule") {
			t.Fatalf("x-delay-error %q", e)
		}
		if v := a.msg.Header.Get("x-delay-original-Nats-Schedule"); !strings.HasPrefix(v, "@at ") {
			t.Fatalf("dead letter headers %v, want Nats-Schedule as x-delay-original-Nats-Schedule", a.msg.Header)
		}
		if _, ok := a.msg.Header["Nats-Schedule"]; ok {
			t.Fatalf("dead letter kept Nats-Schedule: %v", a.msg.Header)
		}
	})
}
