//go:build fault

package fault

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// badCase is one invalid message and the reason it must be dead-lettered with.
type badCase struct {
	name   string
	broker string // source: "nats" or "kafka"
	h      []kv
	key    []byte // Kafka record key
	size   int    // payload bytes
	reason string
}

// goodCase is one valid message that must be delivered once.
type goodCase struct {
	name   string
	broker string
	h      []kv
	key    []byte
	// check inspects the delivered headers; "" when fine.
	check func(h map[string][]string) string
}

// commonBad are bad inputs both brokers can carry, by docs/faults.md row.
func commonBad() []badCase {
	t := func(target string) kv { return kv{"x-target", target} }
	ok := t("out.valid")
	many := []kv{ok}
	for i := range 64 {
		many = append(many, kv{"h" + strconv.Itoa(i), "v"})
	}
	return []badCase{
		// G1: malformed x-delay.
		{name: "g1-abc", h: []kv{ok, {"x-delay", "abc"}}, reason: "invalid_delay"},
		{name: "g1-empty", h: []kv{ok, {"x-delay", ""}}, reason: "invalid_delay"},
		{name: "g1-1d", h: []kv{ok, {"x-delay", "1d"}}, reason: "invalid_delay"},
		{name: "g1-inner-space", h: []kv{ok, {"x-delay", "30 s"}}, reason: "invalid_delay"},
		{name: "g1-30S", h: []kv{ok, {"x-delay", "30S"}}, reason: "invalid_delay"},
		{name: "g1-1e3s", h: []kv{ok, {"x-delay", "1e3s"}}, reason: "invalid_delay"},
		{name: "g1-unicode-digits", h: []kv{ok, {"x-delay", "١٢٣"}}, reason: "invalid_delay"},
		{name: "g1-NaN", h: []kv{ok, {"x-delay", "NaN"}}, reason: "invalid_delay"},
		{name: "g1-lower-iso", h: []kv{ok, {"x-delay", "pt30s"}}, reason: "invalid_delay"},
		{name: "g1-deliver-at", h: []kv{ok, {"x-deliver-at", "tomorrow"}}, reason: "invalid_deliver_at"},
		{name: "g1-both", h: []kv{ok, {"x-delay", "1s"}, {"x-deliver-at", "0"}}, reason: "conflicting_schedule"},
		// G2: negative delays.
		{name: "g2-minus-5s", h: []kv{ok, {"x-delay", "-5s"}}, reason: "invalid_delay"},
		{name: "g2-minus-iso", h: []kv{ok, {"x-delay", "-PT5S"}}, reason: "invalid_delay"},
		{name: "g2-iso-inner-sign", h: []kv{ok, {"x-delay", "PT-5S"}}, reason: "invalid_delay"},
		{name: "g2-minus-ms", h: []kv{ok, {"x-delay", "-1500"}}, reason: "invalid_delay"},
		// G3: huge delays.
		{name: "g3-max-duration", h: []kv{ok, {"x-delay", "2562047h"}}, reason: "delay_too_long"},
		{name: "g3-P10000Y", h: []kv{ok, {"x-delay", "P10000Y"}}, reason: "invalid_delay"},
		{name: "g3-P1M", h: []kv{ok, {"x-delay", "P1M"}}, reason: "invalid_delay"},
		{name: "g3-P1Y", h: []kv{ok, {"x-delay", "P1Y"}}, reason: "invalid_delay"},
		{name: "g3-P53W", h: []kv{ok, {"x-delay", "P53W"}}, reason: "delay_too_long"},
		{name: "g3-ms-overflow", h: []kv{ok, {"x-delay", "9223372036854775807"}}, reason: "invalid_delay"},
		{name: "g3-deliver-at-9999", h: []kv{ok, {"x-deliver-at", "9999-12-31T23:59:59Z"}}, reason: "delay_too_long"},
		// G4: missing target.
		{name: "g4-none", h: []kv{{"x-delay", "1s"}}, reason: "missing_target"},
		{name: "g4-empty", h: []kv{t("")}, reason: "missing_target"},
		// G5: loops.
		{name: "g5-ingress", h: []kv{t("nats:delay.in")}, reason: "target_loop"},
		{name: "g5-cancel", h: []kv{t("nats:delay.cancel")}, reason: "target_loop"},
		{name: "g5-dlq", h: []kv{t("nats:delay.dlq")}, reason: "target_loop"},
		{name: "g5-kafka-ingress", h: []kv{t("kafka:delay.in")}, reason: "target_loop"},
		{name: "g5-hops-at-limit", h: []kv{ok, {"x-delay-hops", "8"}}, reason: "target_loop"},
		{name: "g5-hops-huge", h: []kv{ok, {"x-delay-hops", "18446744073709551616"}}, reason: "target_loop"},
		// G6: invalid targets.
		{name: "g6-star", h: []kv{t("nats:out.*")}, reason: "invalid_target"},
		{name: "g6-gt", h: []kv{t("nats:out.>")}, reason: "invalid_target"},
		{name: "g6-wildcard-own", h: []kv{t("nats:delay.>")}, reason: "invalid_target"},
		{name: "g6-empty-token", h: []kv{t("nats:out..x")}, reason: "invalid_target"},
		{name: "g6-leading-dot", h: []kv{t("nats:.out")}, reason: "invalid_target"},
		{name: "g6-space", h: []kv{t("nats:out. x")}, reason: "invalid_target"},
		{name: "g6-kafka-charset", h: []kv{t("kafka:out/kafka")}, reason: "invalid_target"},
		{name: "g6-kafka-long", h: []kv{t("kafka:" + strings.Repeat("k", 250))}, reason: "invalid_target"},
		{name: "g6-kafka-dotdot", h: []kv{t("kafka:..")}, reason: "invalid_target"},
		{name: "g6-prefix", h: []kv{t("amqp:out.valid")}, reason: "invalid_target"},
		{name: "g6-two-targets", h: []kv{ok, ok}, reason: "invalid_target"},
		// G7: reserved namespaces and the allow list.
		{name: "g7-js-delete", h: []kv{t("nats:$JS.API.STREAM.DELETE.OUT")}, reason: "invalid_target"},
		{name: "g7-js-ack", h: []kv{t("nats:$JS.ACK.IN.delaybridge.1.1.1.1.0")}, reason: "invalid_target"},
		{name: "g7-kv", h: []kv{t("nats:$KV.b.k")}, reason: "invalid_target"},
		{name: "g7-sys", h: []kv{t("nats:$SYS.REQ.SERVER.PING")}, reason: "invalid_target"},
		{name: "g7-inbox", h: []kv{t("nats:_INBOX.x")}, reason: "invalid_target"},
		{name: "g7-offsets", h: []kv{t("kafka:__consumer_offsets")}, reason: "invalid_target"},
		{name: "g7-txn", h: []kv{t("kafka:__transaction_state")}, reason: "invalid_target"},
		{name: "g7-not-allowed", h: []kv{t("nats:forbidden.x")}, reason: "target_not_allowed"},
		// G9: repeated control headers.
		{name: "g9-delay", h: []kv{ok, {"x-delay", "1s"}, {"x-delay", "1s"}}, reason: "invalid_delay"},
		{name: "g9-delay-case", h: []kv{ok, {"x-delay", "1s"}, {"X-Delay", "2s"}}, reason: "invalid_delay"},
		{name: "g9-deliver-at", h: []kv{ok, {"x-deliver-at", "0"}, {"x-deliver-at", "0"}}, reason: "invalid_deliver_at"},
		{name: "g9-id", h: []kv{ok, {"x-delay-id", "a"}, {"x-delay-id", "b"}}, reason: "invalid_id"},
		{name: "g9-hops", h: []kv{ok, {"x-delay-hops", "1"}, {"x-delay-hops", "1"}}, reason: "invalid_headers"},
		{name: "g9-kafka-key", h: []kv{ok, {"x-kafka-key", "1"}, {"x-kafka-key", "2"}}, reason: "invalid_headers"},
		// G10 and other limits.
		{name: "g10-count", h: many, reason: "invalid_headers"},
		{name: "g10-bytes", h: []kv{ok, {"big", strings.Repeat("b", 8200)}}, reason: "invalid_headers"},
		{name: "g10-id-too-long", h: []kv{ok, {"x-delay-id", strings.Repeat("i", 257)}}, reason: "invalid_id"},
		{name: "g10-payload", h: []kv{ok}, size: 70000, reason: "payload_too_large"},
	}
}

// kafkaBad are bad inputs only Kafka can carry (NATS itself would alter or refuse them).
func kafkaBad() []badCase {
	ok := kv{"x-target", "nats:out.valid"}
	return []badCase{
		{name: "g1-leading-space", h: []kv{ok, {"x-delay", " 30s"}}, reason: "invalid_delay"},
		{name: "g1-trailing-newline", h: []kv{ok, {"x-delay", "30s\n"}}, reason: "invalid_delay"},
		{name: "g6-target-crlf", h: []kv{{"x-target", "nats:out.valid\r\n"}}, reason: "invalid_target"},
		{name: "g8-crlf-injection", h: []kv{ok, {"x", "a\r\nNats-Msg-Id: evil"}}, reason: "invalid_headers"},
		{name: "g8-lf", h: []kv{ok, {"x", "a\nb"}}, reason: "invalid_headers"},
		{name: "g8-leading-blank", h: []kv{ok, {"x", " a"}}, reason: "invalid_headers"},
		{name: "g8-trailing-tab", h: []kv{ok, {"x", "a\t"}}, reason: "invalid_headers"},
		{name: "g8-name-colon", h: []kv{ok, {"a:b", "1"}}, reason: "invalid_headers"},
		{name: "g8-name-space", h: []kv{ok, {"a b", "1"}}, reason: "invalid_headers"},
		{name: "g8-name-empty", h: []kv{ok, {"", "1"}}, reason: "invalid_headers"},
		{name: "g8-name-utf8", h: []kv{ok, {"ключ", "1"}}, reason: "invalid_headers"},
		{name: "g8-key-crlf", h: []kv{ok}, key: []byte("k\r\n"), reason: "invalid_headers"},
		{name: "g10-non-utf8", h: []kv{ok, {"x", "\xff\xfe"}}, reason: "invalid_headers"},
		{name: "g10-id-control", h: []kv{ok, {"x-delay-id", "a\x01"}}, reason: "invalid_id"},
		{name: "g10-id-trailing-space", h: []kv{ok, {"x-delay-id", "a "}}, reason: "invalid_id"},
		{name: "g10-id-dot", h: []kv{ok, {"x-delay-id", "."}}, reason: "invalid_id"},
		{name: "g10-id-dot-dot", h: []kv{ok, {"x-delay-id", ".."}}, reason: "invalid_id"},
		{name: "g9-target-case", h: []kv{ok, {"X-TARGET", "nats:out.valid"}}, reason: "invalid_target"},
	}
}

// goodCases are n valid messages of every shape the bad ones border on.
func goodCases(n int) []goodCase {
	// Kafka carries any Nats-* header to the bridge; a JetStream ingress stream would act
	// on them itself (and refuse most), so NATS sources forge only unknown Nats-* names.
	forged := map[string][]kv{
		"kafka": {{"Nats-Rollup", "all"}, {"Nats-Expected-Last-Sequence", "999"}, {"Nats-Msg-Id", "evil"},
			{"Nats-TTL", "1s"}, {"x-delay-due", "1"}, {"x-delay-source", "forged"}, {"x-delay-error", "forged"}},
		"nats": {{"Nats-Custom", "x"}, {"x-delay-due", "1"}, {"x-delay-source", "forged"}, {"x-delay-error", "forged"}},
	}
	clean := func(h map[string][]string) string {
		for k := range h {
			if strings.HasPrefix(strings.ToLower(k), "nats-") && k != "Nats-Msg-Id" {
				return "forwarded " + k
			}
		}
		if v := h["Nats-Msg-Id"]; len(v) > 0 && v[0] == "evil" {
			return "forwarded Nats-Msg-Id: evil"
		}
		if len(h["x-delay-error"]) > 0 || len(h["x-delay-source"]) != 1 || h["x-delay-source"][0] == "forged" {
			return fmt.Sprintf("own headers forged: error %q source %q", h["x-delay-error"], h["x-delay-source"])
		}
		return ""
	}
	hops := func(want string) func(map[string][]string) string {
		return func(h map[string][]string) string {
			if v := h["x-delay-hops"]; len(v) != 1 || v[0] != want {
				return fmt.Sprintf("x-delay-hops %q, want %s", v, want)
			}
			return ""
		}
	}
	kafkaBytes := func(h map[string][]string) string {
		if v := h["x"]; len(v) != 1 || v[0] != "a\r\nNats-Msg-Id: evil\xff " {
			return fmt.Sprintf("x = %q, not byte for byte", v)
		}
		return ""
	}
	delays := []string{"0", "150", "200ms", "PT0.3S", "0.1s"}
	var out []goodCase
	for i := range n {
		broker := "nats"
		if i%2 == 1 {
			broker = "kafka"
		}
		g := goodCase{name: fmt.Sprintf("good-%d", i), broker: broker}
		d := kv{"x-delay", delays[i%len(delays)]}
		switch i % 6 {
		case 0, 1:
			g.h = []kv{{"x-target", "nats:out.valid"}, d, {"tenant", "acme"}}
			g.check = hops("1")
		case 2, 3:
			g.h = append([]kv{{"x-target", "nats:roll.x"}, d}, forged[broker]...)
			g.check = clean
		case 4:
			g.h = []kv{{"x-target", "kafka:out-kafka"}, d, {"x-delay-hops", "7"}}
			g.check = hops("8")
		case 5:
			g.h = []kv{{"x-target", "kafka:out-kafka"}, d, {"x", "a\r\nNats-Msg-Id: evil\xff "}}
			g.check = kafkaBytes
		}
		out = append(out, g)
	}
	// Right at the limits: 64 headers; 8192 bytes of names and values.
	at := []kv{{"x-target", "nats:out.valid"}}
	for i := range 62 {
		at = append(at, kv{"h" + strconv.Itoa(i), "v"})
	}
	out = append(out, goodCase{name: "good-64-headers", broker: "nats", h: at})
	bytes := []kv{{"x-target", "nats:out.valid"}}
	used := len("x-target") + len("nats:out.valid") + len("case") + len("good-8192-bytes") + len("big")
	bytes = append(bytes, kv{"big", strings.Repeat("b", 8192-used)})
	out = append(out, goodCase{name: "good-8192-bytes", broker: "kafka", h: bytes})
	return out
}

// TestGBadInput is rows G1-G10 of docs/faults.md in one run against the bridge binary: about a
// hundred bad inputs over NATS (JetStream) and Kafka (kfake), every one of which must be
// dead-lettered on its source broker with the expected reason and none parked, mixed with
// as many valid messages (forged Nats-* and x-delay-* headers among them), every one of
// which must be delivered, to a stream that allows rollups kept intact. A relay that sends
// every delivery back to the bridge shows the hop counter stopping a loop the target
// check cannot see.
func TestGBadInput(t *testing.T) {
	start := time.Now()
	s := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ROLL", Subjects: []string{"roll.>"}, AllowRollup: true}); err != nil {
		t.Fatal(err)
	}
	kcl, brokers := withKafka(t, s)
	b := e2etest.StartReady(t, bridgeBin, s.envWith(
		"BRIDGE_TARGET_ALLOW", "out.*,roll.*,loop.*,out-kafka,kafka:__consumer_offsets,kafka:__transaction_state",
		"BRIDGE_MAX_PAYLOAD", "65536"))

	dead, good := newTally(), newTally()
	natsSub(t, s.nc, "delay.dlq", dead.addNATS)
	natsSub(t, s.nc, "out.>", good.addNATS)
	natsSub(t, s.nc, "roll.>", good.addNATS)
	kafkaTap(t, brokers, "delay.dlq", dead.addKafka)
	kafkaTap(t, brokers, "out-kafka", good.addKafka)

	// The loop: every delivery on loop.x goes back to delay.in with its headers.
	var loops atomic.Int32
	natsSub(t, s.nc, "loop.x", func(m *nats.Msg) {
		loops.Add(1)
		back := nats.NewMsg("delay.in")
		for k, vs := range m.Header {
			if k == "Nats-Msg-Id" || k == "x-delay-id" {
				continue
			}
			back.Header[k] = vs
		}
		back.Header.Set("x-target", "loop.x")
		_ = s.nc.PublishMsg(back)
	})

	var bad []badCase
	for _, c := range commonBad() {
		for _, broker := range []string{"nats", "kafka"} {
			c.broker = broker
			bad = append(bad, c)
		}
	}
	for _, c := range kafkaBad() {
		c.broker = "kafka"
		bad = append(bad, c)
	}
	goods := goodCases(len(bad))
	var recs []*kgo.Record
	sendOne := func(name, broker string, h []kv, key []byte, size int) {
		payload := []byte(strings.Repeat("p", max(size, 1)))
		if broker == "nats" {
			m := nats.NewMsg("delay.in")
			m.Header.Set("case", name)
			for _, f := range h {
				m.Header[f.k] = append(m.Header[f.k], f.v)
			}
			m.Data = payload
			if _, err := s.js.PublishMsg(ctx, m); err != nil {
				t.Fatalf("publish %s: %v", name, err)
			}
			return
		}
		r := &kgo.Record{Topic: "delay.in", Key: key, Value: payload, Headers: []kgo.RecordHeader{{Key: "case", Value: []byte(name)}}}
		for _, f := range h {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: f.k, Value: []byte(f.v)})
		}
		recs = append(recs, r)
	}
	var badNames, goodNames []string
	for i := range max(len(bad), len(goods)) {
		if i < len(bad) {
			c := bad[i]
			name := c.broker + ":" + c.name
			badNames = append(badNames, name)
			sendOne(name, c.broker, c.h, c.key, c.size)
		}
		if i < len(goods) {
			g := goods[i]
			goodNames = append(goodNames, g.name)
			sendOne(g.name, g.broker, g.h, g.key, 0)
		}
	}
	sendOne("loop", "nats", []kv{{"x-target", "loop.x"}}, nil, 0)
	badNames = append(badNames, "loop")
	if err := kcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	// G8 through the message API: a header named like the bridge's internal header list
	// (which would make the NATS adapter publish Nats-Rollup to the ROLL stream) is refused:
	// 400 invalid_headers, nothing parked.
	forged := headers.ToMetadata(headers.List{{Key: "Nats-Rollup", Value: "all"}, {Key: "Nats-Rollup", Value: "all"}}, nil)[headers.MetaHeaders]
	api := &client.Client{Base: "http://" + b.APIAddr}
	if _, err := api.Send(ctx, httpapi.PostRequest{Target: "nats:roll.x", Delay: []byte("100"), Payload: new(string),
		Headers: map[string]string{"case": "good-http-forged", headers.MetaHeaders: forged, "Nats-Rollup": "all"}}); err == nil ||
		!strings.Contains(err.Error(), "invalid_headers") {
		t.Fatalf("message API with a forged internal header: %v, want 400 invalid_headers", err)
	}

	missingGood := good.waitAll(goodNames, 30*time.Second)
	missingDead := dead.waitAll(badNames, 10*time.Second)
	time.Sleep(500 * time.Millisecond) // late extra copies, if any
	for _, n := range missingGood {
		t.Errorf("valid message %s not delivered", n)
	}
	for _, n := range missingDead {
		t.Errorf("bad input %s not dead-lettered", n)
	}

	wrong, delivered, dlq := 0, 0, 0
	want := map[string]string{"loop": "target_loop"}
	for _, c := range bad {
		want[c.broker+":"+c.name] = c.reason
	}
	for _, n := range badNames {
		cnt, h := dead.get(n)
		if cnt == 0 {
			continue
		}
		dlq++
		got := ""
		if e := h["x-delay-error"]; len(e) > 0 {
			got, _, _ = strings.Cut(e[0], ":")
		}
		if got != want[n] || cnt != 1 {
			wrong++
			t.Errorf("%s: dead-lettered %d times with %q, want once with %s", n, cnt, h["x-delay-error"], want[n])
		}
		if c, _ := good.get(n); c > 0 {
			t.Errorf("%s: bad input delivered to a target", n)
		}
	}
	for _, g := range goods {
		cnt, h := good.get(g.name)
		if cnt == 0 {
			continue
		}
		delivered++
		if cnt != 1 {
			t.Errorf("%s delivered %d times", g.name, cnt)
		}
		if g.check != nil {
			if p := g.check(h); p != "" {
				t.Errorf("%s: %s", g.name, p)
			}
		}
		if c, _ := dead.get(g.name); c > 0 {
			t.Errorf("%s: valid message dead-lettered", g.name)
		}
	}
	if n := loops.Load(); n != 8 {
		t.Errorf("the loop was delivered %d times, want 8 (BRIDGE_MAX_HOPS)", n)
	}
	str, err := s.js.Stream(ctx, "ROLL")
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolled := 0
	for _, g := range goods {
		if g.h[0].v == "nats:roll.x" {
			rolled++
		}
	}
	if int(info.State.Msgs) != rolled {
		t.Errorf("ROLL stream holds %d messages, want %d: a forged Nats-Rollup purged it", info.State.Msgs, rolled)
	}
	p := statsParked(t, b)
	if p != 0 {
		t.Errorf("%d messages still parked", p)
	}
	t.Logf("G1-G10: %d bad inputs (%d NATS, %d Kafka), %d dead-lettered, %d with a wrong reason or count, %d parked; %d valid sent, %d delivered; loop stopped after %d hops; ROLL stream %d/%d; %s",
		len(badNames), countBroker(bad, "nats")+1, countBroker(bad, "kafka"), dlq, wrong, p, len(goods), delivered, loops.Load(), info.State.Msgs, rolled, time.Since(start).Round(time.Millisecond))
}

func countBroker(cs []badCase, broker string) int {
	n := 0
	for _, c := range cs {
		if c.broker == broker {
			n++
		}
	}
	return n
}
