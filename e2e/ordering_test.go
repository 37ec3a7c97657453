package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Ordering keys (x-delay-ordering-key, docs/contract.md section 11): the events of an
// order, published created, paid, cancelled with delays that invert their order, reach
// the target in publish order per key, none before its own x-delay-due.
const orderingKeys = 20

// orderEvents are the events of one order in publish order, each with its delay: without
// a key they would arrive in the reverse order.
var orderEvents = []struct {
	name  string
	delay time.Duration
}{{"created", 600 * time.Millisecond}, {"paid", 300 * time.Millisecond}, {"cancelled", 0}}

// ordered is one delivered event: "<key>/<event>", its x-delay-due and arrival.
type ordered struct {
	payload string
	due     time.Time
	at      time.Time
}

// TestOrderingKeyNATS: every order's events published in a burst over core NATS to the
// ingress subject, each with its order as the ordering key, to a core NATS target.
func TestOrderingKeyNATS(t *testing.T) {
	s := newStack(t)
	startBridge(t, s.env)
	target := s.name("orders.events")
	out := subscribe(t, s.nc, target)
	sent := time.Now()
	for k := range orderingKeys {
		for _, e := range orderEvents {
			hdr := nats.Header{}
			hdr.Set("x-delay-ordering-key", fmt.Sprintf("order-%d", k))
			hdr.Set("x-delay", strconv.FormatInt(e.delay.Milliseconds(), 10))
			hdr.Set("x-target", target)
			if err := s.nc.PublishMsg(&nats.Msg{Subject: s.name("delay.in"), Header: hdr, Data: []byte(fmt.Sprintf("order-%d/%s", k, e.name))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	checkOrdered(t, sent, func(within time.Duration) (ordered, bool) {
		select {
		case a := <-out:
			if a.msg.Header.Get("x-delay-ordering-key") != "" {
				t.Errorf("x-delay-ordering-key forwarded")
			}
			return ordered{payload: string(a.msg.Data), due: dueOf(a.msg.Header.Get("x-delay-due")), at: a.at}, true
		case <-time.After(within):
			return ordered{}, false
		}
	})
}

// TestOrderingKeyKafka: the same over Kafka: records on the ingress topic (the order as
// the record key too, so one partition keeps the publish order), to a Kafka target.
func TestOrderingKeyKafka(t *testing.T) {
	s, cl := kafkaStack(t, false)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	target := s.name("orders.events")
	s.createTopic(t, brokers, target, 1)
	startBridge(t, s.env)
	out := consume(t, brokers, target)
	sent := time.Now()
	for k := range orderingKeys {
		key := fmt.Sprintf("order-%d", k)
		for _, e := range orderEvents {
			produce(t, cl, s.name("delay.in"), []byte(key), key+"/"+e.name, "X-Delay-Ordering-Key", key,
				"x-delay", strconv.FormatInt(e.delay.Milliseconds(), 10), "x-target", "kafka:"+target)
		}
	}
	checkOrdered(t, sent, func(within time.Duration) (ordered, bool) {
		select {
		case r := <-out:
			if _, n := header(r.rec, "X-Delay-Ordering-Key"); n != 0 {
				t.Errorf("x-delay-ordering-key forwarded")
			}
			return ordered{payload: string(r.rec.Value), due: dueOf(mustHeader(t, r.rec, "x-delay-due")), at: r.at}, true
		case <-time.After(within):
			return ordered{}, false
		}
	})
}

func dueOf(v string) time.Time {
	ms, _ := strconv.ParseInt(v, 10, 64)
	return time.UnixMilli(ms)
}

// checkOrdered receives every event of the orders (next), sent from sent on, and checks
// that each order's events arrived in publish order, each no earlier than its x-delay-due,
// which is no earlier than its delay after sent; and that nothing more follows.
func checkOrdered(t *testing.T, sent time.Time, next func(time.Duration) (ordered, bool)) {
	t.Helper()
	got := map[string][]string{} // per key, the events as they arrived
	for n := 0; n < orderingKeys*len(orderEvents); n++ {
		o, ok := next(15 * time.Second)
		if !ok {
			t.Fatalf("%d of %d events arrived: %v", n, orderingKeys*len(orderEvents), got)
		}
		key, event, _ := strings.Cut(o.payload, "/")
		if o.at.Before(o.due) {
			t.Errorf("%s arrived %s before its x-delay-due", o.payload, o.due.Sub(o.at))
		}
		for _, e := range orderEvents {
			if e.name == event && o.due.Before(sent.Add(e.delay)) {
				t.Errorf("%s due %s after the first send, before its delay %s", o.payload, o.due.Sub(sent), e.delay)
			}
		}
		got[key] = append(got[key], event)
	}
	want := make([]string, len(orderEvents))
	for i, e := range orderEvents {
		want[i] = e.name
	}
	for k := range orderingKeys {
		key := fmt.Sprintf("order-%d", k)
		if strings.Join(got[key], ",") != strings.Join(want, ",") {
			t.Errorf("%s: events arrived as %v, want %v", key, got[key], want)
		}
	}
	if o, ok := next(time.Second); ok {
		t.Errorf("more than the events sent: %+v", o)
	}
}
