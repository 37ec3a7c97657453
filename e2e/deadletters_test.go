package e2e

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// natsDeadLetters makes dead letters the way an operator gets them: a bridge whose
// allow-list does not name target dead-letters ok messages to it (target_not_allowed,
// payloads ok-<i>), and bad ones with an invalid x-delay (invalid_delay, bad-<i>); the
// bridge is then stopped. The stream DLQ keeps the dead-letter subject; it allows direct
// gets when direct (the listing then reads batches).
func natsDeadLetters(t *testing.T, s *stack, target string, ok, bad int, direct bool) {
	t.Helper()
	name := s.createStream(t, "DLQ", s.name("delay.dlq"))
	if direct {
		js, err := jetstream.New(s.nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.UpdateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{s.name("delay.dlq")}, AllowDirect: true}); err != nil {
			t.Fatal(err)
		}
	}
	env := maps.Clone(s.env)
	env["BRIDGE_TARGET_ALLOW"] = s.name("orders.*")
	b := startBridge(t, env)
	send := func(payload, delay, want string) {
		hdr := nats.Header{}
		hdr.Set("x-target", target)
		hdr.Set("x-delay", delay)
		hdr.Set("x-delay-id", payload)
		if reply := request(t, s.nc, s.name("delay.in"), hdr, payload); !strings.HasPrefix(fmt.Sprint(reply["error"]), want) {
			t.Fatalf("reply %v, want %s", reply, want)
		}
	}
	for i := range ok {
		send(fmt.Sprint("ok-", i), "100ms", "target_not_allowed")
	}
	for i := range bad {
		send(fmt.Sprint("bad-", i), "soon", "invalid_delay")
	}
	if err, _ := b.Stop(t, 15*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// listAll pages through GET /v1/dead-letters (limit per page) and returns every letter.
func listAll(t *testing.T, c *client.Client, reason string, limit int) []httpapi.DeadLetter {
	t.Helper()
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if reason != "" {
		q.Set("reason", reason)
	}
	var all []httpapi.DeadLetter
	for {
		res, err := c.DeadLetters(t.Context(), q)
		if err != nil {
			t.Fatalf("GET /v1/dead-letters %v: %v", q, err)
		}
		all = append(all, res.DeadLetters...)
		if res.NextCursor == nil {
			return all
		}
		q.Set("cursor", *res.NextCursor)
	}
}

// redriveAtOnce sends req to every client at the same time and returns the answers.
func redriveAtOnce(t *testing.T, req httpapi.RedriveRequest, cs ...*client.Client) []httpapi.RedriveResponse {
	t.Helper()
	out := make([]httpapi.RedriveResponse, len(cs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range cs {
		wg.Go(func() {
			<-start
			res, err := c.Redrive(t.Context(), req)
			if err != nil {
				t.Errorf("redrive on replica %d: %v", i, err)
			}
			out[i] = res
		})
	}
	close(start)
	wg.Wait()
	return out
}

// TestDeadLettersAPINATS: the dead letters of a JetStream stream (allowing direct gets:
// the listing reads batches; TestConsoleDeadLetters reads a stream without) through the
// built bridge's API. The list pages through all of them and by reason; a dry run counts by
// reason and sends nothing; two replicas asked at once to redrive target_not_allowed send
// each letter once (each delivered once); a redrive by ids of two invalid ones counts
// them refused again (the bridge dead-letters them anew); `bridge redrive --dry-run` then
// sees what the API left.
func TestDeadLettersAPINATS(t *testing.T) {
	s := newStack(t)
	target := s.name("billing.due")
	natsDeadLetters(t, s, target, 60, 10, true)
	b1, b2 := startBridge(t, s.env), startBridge(t, s.env)
	c1, c2 := &client.Client{Base: "http://" + b1.APIAddr}, &client.Client{Base: "http://" + b2.APIAddr}
	arrivals := subscribe(t, s.nc, target)

	all := listAll(t, c1, "", 25)
	if len(all) != 70 {
		t.Fatalf("listed %d dead letters, want 70", len(all))
	}
	if d := all[0]; d.Reason != "target_not_allowed" || d.Target != target || !strings.HasPrefix(d.Error, "target_not_allowed") || d.Size != 4 || d.At <= 0 {
		t.Fatalf("first letter: %+v", d)
	}
	if bad := listAll(t, c2, "invalid_delay", 3); len(bad) != 10 || bad[0].Reason != "invalid_delay" {
		t.Fatalf("invalid_delay: %d letters (%+v)", len(bad), bad)
	}
	dry, err := c1.Redrive(t.Context(), httpapi.RedriveRequest{Reason: "target_not_allowed", DryRun: true})
	if err != nil || dry.Matched != 60 || dry.Changed != 0 || dry.ByReason["invalid_delay"].Left != 10 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	select {
	case a := <-arrivals:
		t.Fatalf("a dry run delivered %q", a.msg.Data)
	case <-time.After(300 * time.Millisecond):
	}

	res := redriveAtOnce(t, httpapi.RedriveRequest{Reason: "target_not_allowed"}, c1, c2)
	if res[0].Changed+res[1].Changed != 60 {
		t.Fatalf("two replicas at once: %+v and %+v, want 60 changed between them", res[0], res[1])
	}
	got := map[string]int{}
	for range 60 {
		got[string(receive(t, arrivals, 15*time.Second).msg.Data)]++
	}
	select {
	case a := <-arrivals:
		got[string(a.msg.Data)]++
	case <-time.After(time.Second):
	}
	for i := range 60 {
		if n := got[fmt.Sprint("ok-", i)]; n != 1 {
			t.Errorf("ok-%d delivered %d times", i, n)
		}
	}
	left := listAll(t, c2, "", 1000)
	if len(left) != 10 {
		t.Fatalf("left after the redrive: %d letters, want the 10 invalid ones", len(left))
	}
	ids := []string{left[0].ID, left[1].ID}
	again, err := c2.Redrive(t.Context(), httpapi.RedriveRequest{IDs: ids})
	if err != nil || again.ByReason["invalid_delay"].Refused != 2 || again.Changed != 2 {
		t.Fatalf("by ids %v: %+v %v, want 2 refused again", ids, again, err)
	}
	after := listAll(t, c1, "", 1000)
	if len(after) != 10 || slices.ContainsFunc(after, func(d httpapi.DeadLetter) bool { return slices.Contains(ids, d.ID) }) {
		t.Fatalf("after the redrive by ids: %+v, want 10 letters, the 2 old ones replaced by new ones", after)
	}
	out, err := runCLIEnv(t, s.env, "redrive", "--dry-run")
	if err != nil || !regexpLine(out, `invalid_delay\s+10\s+0`) {
		t.Fatalf("bridge redrive --dry-run after the API: %v\n%s", err, out)
	}
}

// TestDeadLettersAPIKafka: the dead letters of a Kafka topic through the built bridge's
// API: listed from the redrive group's offsets without committing, by reason; a redrive
// by id sends that letter only; two replicas asked at once to redrive target_not_allowed
// send each letter once (the consumer group `<group>-redrive` splits the partitions);
// then `bridge redrive --dry-run` (the same group) finds nothing left.
func TestDeadLettersAPIKafka(t *testing.T) {
	s, cl := kafkaStack(t, false)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	target := s.name("billing.due")
	s.createTopic(t, brokers, target, 3)
	dlq := s.name("delay.dlq")
	kafkaLetters(t, cl, dlq, "ok", target, "target_not_allowed: "+target, 300)
	kafkaLetters(t, cl, dlq, "bad", target, "invalid_delay: soon", 30, "x-delay", "soon")
	b1, b2 := startBridge(t, s.env), startBridge(t, s.env)
	c1, c2 := &client.Client{Base: "http://" + b1.APIAddr}, &client.Client{Base: "http://" + b2.APIAddr}
	arrivals := consume(t, brokers, target)

	all := listAll(t, c1, "", 100)
	seen := map[string]bool{}
	for _, d := range all {
		seen[d.ID] = true
	}
	if len(all) != 330 || len(seen) != 330 {
		t.Fatalf("listed %d dead letters (%d ids), want 330", len(all), len(seen))
	}
	if ok := listAll(t, c2, "target_not_allowed", 50); len(ok) != 300 {
		t.Fatalf("target_not_allowed: %d letters, want 300", len(ok))
	}
	if again := listAll(t, c1, "", 1000); len(again) != 330 {
		t.Fatalf("listed again: %d letters: listing committed", len(again))
	}
	// The first letter of a partition: redriving it by id passes no other letter.
	first := all[0]
	if !strings.HasSuffix(first.ID, ":0") || first.Reason != "target_not_allowed" {
		t.Fatalf("first letter %+v", first)
	}
	one, err := c1.Redrive(t.Context(), httpapi.RedriveRequest{IDs: []string{first.ID}})
	if err != nil || one.Changed != 1 {
		t.Fatalf("by id %s: %+v %v", first.ID, one, err)
	}
	firstID, _ := header(receiveRecord(t, arrivals, 15*time.Second).rec, "x-delay-id")
	if !strings.HasPrefix(firstID, "ok-") {
		t.Fatalf("the letter redriven by id was delivered as %q", firstID)
	}
	if n := len(listAll(t, c2, "", 1000)); n != 329 {
		t.Fatalf("after the redrive by id: %d letters listed, want 329", n)
	}
	dry, err := c2.Redrive(t.Context(), httpapi.RedriveRequest{Reason: "target_not_allowed", DryRun: true})
	if err != nil || dry.Matched != 299 || dry.ByReason["invalid_delay"].Left != 30 {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	res := redriveAtOnce(t, httpapi.RedriveRequest{Reason: "target_not_allowed"}, c1, c2)
	if res[0].Changed+res[1].Changed != 299 {
		t.Fatalf("two replicas at once: %+v and %+v, want 299 changed between them", res[0], res[1])
	}
	delivered := map[string]int{firstID: 1}
	for range 299 {
		a := receiveRecord(t, arrivals, 30*time.Second)
		id, _ := header(a.rec, "x-delay-id")
		delivered[id]++
	}
	select {
	case a := <-arrivals:
		id, _ := header(a.rec, "x-delay-id")
		delivered[id]++
	case <-time.After(2 * time.Second):
	}
	twice := 0
	for _, n := range delivered {
		if n != 1 {
			twice++
		}
	}
	if len(delivered) != 300 || twice != 0 {
		t.Fatalf("delivered %d ids, %d of them more than once; want 300 once each", len(delivered), twice)
	}
	out, err := runCLIEnv(t, s.env, "redrive", "--dry-run")
	if err != nil || regexpLine(out, `target_not_allowed\s+\d+\s+\d+`) {
		t.Fatalf("bridge redrive --dry-run after the API: %v\n%s", err, out)
	}
}
