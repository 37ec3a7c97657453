package redrive

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/testnats"
)

// pages reads every page of list (limit per page) and returns the ids in order.
func pages(t *testing.T, list func(from string) (Page, error)) []Letter {
	t.Helper()
	var all []Letter
	from := ""
	for range 1000 {
		p, err := list(from)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Letters...)
		if p.Next == "" {
			return all
		}
		from = p.Next
	}
	t.Fatal("paging does not end")
	return nil
}

func ids(ls []Letter) string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.ID
	}
	return strings.Join(out, ",")
}

// Listing NATS dead letters reads the stream by sequence (with batched direct gets when
// the stream allows them), pages by limit, filters by reason, describes each letter,
// skips messages of the stream on other subjects, and changes nothing (no consumer, every
// letter still there).
func TestListNATS(t *testing.T) {
	for _, tc := range []struct{ direct, only bool }{{false, false}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("direct=%t,only_dlq=%t", tc.direct, tc.only), func(t *testing.T) { testListNATS(t, tc.direct, tc.only) })
	}
}

// testListNATS lists letters at sequences 1-4 and 6-9; 5 is a message on another subject
// of the stream, or (only: the stream keeps the dead-letter subject alone) a deleted letter.
func testListNATS(t *testing.T, direct, only bool) {
	srv := testnats.Start(t)
	nc := testnats.Connect(t, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subjects := []string{"delay.dlq", "other.subject"}
	if only {
		subjects = subjects[:1]
	}
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "DLQ", Subjects: subjects, AllowDirect: direct})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		reason := "publish_failed"
		if i%3 == 0 {
			reason = "expired"
		}
		letter(t, js, strings.Repeat("x", i), "x-target", fmt.Sprintf("out.%d", i), "x-delay-error", reason+": because")
		switch {
		case i == 3 && only:
			letter(t, js, "gone", "x-delay-error", "expired: x")
			if err := st.DeleteMsg(t.Context(), 5); err != nil {
				t.Fatal(err)
			}
		case i == 3:
			if _, err := js.Publish(t.Context(), "other.subject", []byte("not a letter")); err != nil {
				t.Fatal(err)
			}
		}
	}
	letter(t, js, "", "x-target", "out.big", "x-delay-original-size", "9000", "x-delay-error", "too_large: 9000 bytes")
	cfg := NATSConfig{DLQSubject: "delay.dlq"}
	list := func(reason string, limit int) []Letter {
		return pages(t, func(from string) (Page, error) {
			return ListNATS(t.Context(), nc, cfg, ListQuery{Reason: reason, Limit: limit, From: from})
		})
	}
	if got := ids(list("", 3)); got != "1,2,3,4,6,7,8,9" {
		t.Fatalf("all, pages of 3: %s", got)
	}
	if got := ids(list("expired", 1)); got != "1,4,8" {
		t.Fatalf("expired, pages of 1: %s", got)
	}
	all := list("", 100)
	if l := all[1]; l.Reason != "publish_failed" || l.Error != "publish_failed: because" || l.Target != "out.1" || l.Size != 1 ||
		time.Since(time.UnixMilli(l.At)) > time.Minute || time.Since(time.UnixMilli(l.At)) < 0 {
		t.Fatalf("letter 2: %+v", l)
	}
	if l := all[7]; l.Reason != "too_large" || l.Size != 9000 {
		t.Fatalf("payload-less letter: %+v", l)
	}
	if _, err := ListNATS(t.Context(), nc, cfg, ListQuery{Limit: 1, From: "x"}); err == nil {
		t.Fatal("a bad position was read")
	}
	s, err := js.Stream(t.Context(), "DLQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := 9 - b2i(only); info.State.Msgs != uint64(want) || info.State.Consumers != 0 {
		t.Fatalf("after listing: %d messages, %d consumers; want %d, 0", info.State.Msgs, info.State.Consumers, want)
	}
}

// Redriving NATS letters by id sends exactly those (an id of no letter: not found), and
// three runs at once with the same ids send each letter once: through a core ingress,
// which drops no duplicate, only the claims keep them apart.
func TestNATSByIDs(t *testing.T) {
	nc, js := natsSetup(t)
	var mu sync.Mutex
	var in []string // payloads the ingress took
	sub, err := nc.Subscribe("delay.in", func(m *natsgo.Msg) {
		mu.Lock()
		in = append(in, string(m.Data))
		mu.Unlock()
		_ = m.Respond([]byte(`{"id":"x","due":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	for i := range 40 {
		letter(t, js, fmt.Sprint(i), "x-target", "out", "x-delay-error", "publish_failed: x")
	}
	cfg := NATSConfig{DLQSubject: "delay.dlq", Ingress: "delay.in"}
	counts, err := NATS(t.Context(), nc, cfg, Options{IDs: []string{"2", "5", "99"}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "dry run", counts, map[string]Tally{"publish_failed": {Selected: 2}, ReasonNotFound: {Other: 1}})
	var picked []string
	for i := 1; i <= 40; i += 2 {
		picked = append(picked, fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	results := make([]Counts, 3)
	for i := range results {
		wg.Go(func() {
			c, err := NATS(t.Context(), nc, cfg, Options{IDs: picked})
			if err != nil {
				t.Error(err)
			}
			results[i] = c
		})
	}
	wg.Wait()
	sent := 0
	for _, c := range results {
		if c["publish_failed"] != nil {
			sent += c["publish_failed"].Redriven
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(in)
	if sent != 20 || len(in) != 20 || len(slices.Compact(in)) != 20 {
		t.Fatalf("three runs at once: %d counted redriven, ingress holds %d (%v); want 20 once each", sent, len(in), in)
	}
	left := ids(pages(t, func(from string) (Page, error) {
		return ListNATS(t.Context(), nc, NATSConfig{DLQSubject: "delay.dlq"}, ListQuery{Limit: 100, From: from})
	}))
	var want []string
	for i := 2; i <= 40; i += 2 {
		want = append(want, fmt.Sprint(i))
	}
	if left != strings.Join(want, ",") {
		t.Fatalf("letters left: %s", left)
	}
}

// Listing Kafka letters reads the partitions in order from the redrive group's committed
// offsets, pages with a position over the partitions, filters by reason, and commits
// nothing; a redrive by ids sends those and passes no letter after the last one named.
func TestListKafka(t *testing.T) {
	brokers, cl := kafkaLetterBox(t)
	for i := range 5 {
		kletter(t, cl, 0, "", fmt.Sprint("a", i), "x-target", "out.a", "x-delay-error", "publish_failed: x")
		reason := "expired"
		if i == 4 {
			reason = "publish_failed"
		}
		kletter(t, cl, 1, "", fmt.Sprint("b", i), "x-target", "out.b", "x-delay-error", reason+": y")
	}
	cfg := KafkaConfig{Brokers: brokers, DLQTopic: "delay.dlq", Ingress: "delay.in", Group: "bridge-redrive"}
	list := func(reason string, limit int) []Letter {
		return pages(t, func(from string) (Page, error) {
			return ListKafka(t.Context(), cfg, ListQuery{Reason: reason, Limit: limit, From: from})
		})
	}
	if got := ids(list("", 3)); got != "0:0,0:1,0:2,0:3,0:4,1:0,1:1,1:2,1:3,1:4" {
		t.Fatalf("all, pages of 3: %s", got)
	}
	if got := ids(list("publish_failed", 2)); got != "0:0,0:1,0:2,0:3,0:4,1:4" {
		t.Fatalf("publish_failed, pages of 2: %s", got)
	}
	if l := list("", 100)[5]; l.Reason != "expired" || l.Target != "out.b" || l.Size != 2 || l.At <= 0 {
		t.Fatalf("letter 1:0: %+v", l)
	}
	if committed := groupOffsets(t, brokers); committed != 0 {
		t.Fatalf("listing committed (offsets sum %d)", committed)
	}
	counts, err := Kafka(t.Context(), cfg, Options{IDs: []string{"0:1", "1:2", "7:0", "0:99"}})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "by ids", counts, map[string]Tally{"publish_failed": {Redriven: 1, Selected: 1, Left: 1},
		"expired": {Redriven: 1, Selected: 1, Left: 2}, ReasonNotFound: {Other: 2}})
	recs := ingressRecords(t, brokers)
	var sent []string
	for _, r := range recs {
		sent = append(sent, string(r.Value))
	}
	slices.Sort(sent)
	if strings.Join(sent, ",") != "a1,b2" {
		t.Fatalf("redriven by ids: %v, want a1, b2", sent)
	}
	if got := ids(list("", 100)); got != "0:2,0:3,0:4,1:3,1:4" {
		t.Fatalf("listed after the redrive by ids: %s", got)
	}
}

func TestParseIDs(t *testing.T) {
	for _, id := range []string{"0", "01", "-1", "x", "", "1.0", "18446744073709551616"} {
		if _, err := ParseNATSID(id); err == nil {
			t.Errorf("NATS id %q taken", id)
		}
	}
	if seq, err := ParseNATSID("18446744073709551615"); err != nil || seq != 1<<64-1 {
		t.Errorf("largest NATS id: %d %v", seq, err)
	}
	for _, id := range []string{"-1:0", "0:-1", "0:01", "00:1", "2147483648:0", "1:2:3", "1", ":1", "1:", "0:9223372036854775808"} {
		if _, _, err := ParseKafkaID(id); err == nil {
			t.Errorf("Kafka id %q taken", id)
		}
	}
	if p, o, err := ParseKafkaID("2147483647:9223372036854775807"); err != nil || p != 1<<31-1 || o != 1<<63-1 {
		t.Errorf("largest Kafka id: %d %d %v", p, o, err)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
