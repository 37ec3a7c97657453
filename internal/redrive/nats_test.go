package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/testnats"
)

// letter publishes a dead letter to delay.dlq (kept by the DLQ stream).
func letter(t *testing.T, js jetstream.JetStream, payload string, kv ...string) {
	t.Helper()
	m := natsgo.NewMsg("delay.dlq")
	for i := 0; i+1 < len(kv); i += 2 {
		m.Header.Add(kv[i], kv[i+1])
	}
	m.Data = []byte(payload)
	if _, err := js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
}

// streamMsgs returns the payloads in a stream, by sequence, and their headers.
func streamMsgs(t *testing.T, js jetstream.JetStream, name string) ([]string, []natsgo.Header) {
	t.Helper()
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var payloads []string
	var hdrs []natsgo.Header
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, string(m.Data))
		hdrs = append(hdrs, m.Header)
	}
	return payloads, hdrs
}

func natsSetup(t *testing.T) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	srv := testnats.Start(t)
	nc := testnats.Connect(t, srv.URL())
	testnats.CreateStream(t, nc, "DLQ", "delay.dlq")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Through a JetStream ingress: a dry run changes nothing; a run selected by reason
// redrives only those letters (confirmed by the ingress stream, then gone from the DLQ
// stream), with the bridge's own headers dropped and the schedule header restored; a
// letter without payload always stays.
func TestNATSJetStream(t *testing.T) {
	nc, js := natsSetup(t)
	testnats.CreateStream(t, nc, "IN", "delay.in")
	letter(t, js, "a", "x-target", "out.a", "x-delay-id", "m1", "x-delay-due", "123", "x-delay-source", "nats:delay.in",
		"x-delay-hops", "1", "x-delay-error", "publish_failed: 10 attempts, last: timeout")
	letter(t, js, "b", "x-target", "out.b", "x-delay-original-Nats-Expected-Stream", "X", "x-delay-error", "target_not_allowed: out.b")
	letter(t, js, "", "x-target", "out.c", "x-delay-original-size", "5000", "x-delay-error", "too_large: 5000 bytes")
	// A NATS schedule cannot go through a JetStream ingress (the stream refuses it; without
	// it the message would be early): left.
	letter(t, js, "s", "x-target", "out.s", "x-delay-original-Nats-Schedule", "@at 2030-01-01T00:00:00Z", "x-delay-error", "target_not_allowed: out.s")
	cfg := NATSConfig{DLQSubject: "delay.dlq", Ingress: "delay.in", IngressStream: "IN"}

	counts, err := NATS(t.Context(), nc, cfg, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Tally{"publish_failed": {Selected: 1}, "target_not_allowed": {Selected: 1}, "no_payload": {Left: 1}, "nats_schedule": {Left: 1}}
	checkCounts(t, "dry run", counts, want)
	if dlq, _ := streamMsgs(t, js, "DLQ"); len(dlq) != 4 {
		t.Fatalf("dry run changed the DLQ stream: %q", dlq)
	}
	if in, _ := streamMsgs(t, js, "IN"); len(in) != 0 {
		t.Fatalf("dry run published: %q", in)
	}

	counts, err = NATS(t.Context(), nc, cfg, Options{Reasons: []string{"publish_failed"}})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "publish_failed", counts, map[string]Tally{"publish_failed": {Redriven: 1, Selected: 1},
		"target_not_allowed": {Left: 1}, "no_payload": {Left: 1}, "nats_schedule": {Left: 1}})
	in, hs := streamMsgs(t, js, "IN")
	if len(in) != 1 || in[0] != "a" {
		t.Fatalf("ingress stream holds %q, want [a]", in)
	}
	h := hs[0]
	for k, v := range map[string]string{"x-target": "out.a", "x-delay-id": "m1", "x-delay-hops": "1", "Nats-Msg-Id": "redrive:DLQ:1"} {
		if got := h.Get(k); got != v {
			t.Errorf("redriven %s = %q, want %q (headers %v)", k, got, v, h)
		}
	}
	for _, k := range []string{"x-delay-error", "x-delay-due", "x-delay-source"} {
		if _, ok := h[k]; ok {
			t.Errorf("redriven letter still has %s: %v", k, h)
		}
	}
	if dlq, _ := streamMsgs(t, js, "DLQ"); strings.Join(dlq, ",") != "b,,s" {
		t.Fatalf("DLQ stream after the first run: %q, want b, the payload-less letter and s", dlq)
	}

	counts, err = NATS(t.Context(), nc, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "all", counts, map[string]Tally{"target_not_allowed": {Redriven: 1, Selected: 1}, "no_payload": {Left: 1}, "nats_schedule": {Left: 1}})
	in, hs = streamMsgs(t, js, "IN")
	if len(in) != 2 || in[1] != "b" {
		t.Fatalf("ingress stream holds %q, want [a b]", in)
	}
	if got := hs[1].Get("x-delay-original-Nats-Expected-Stream"); got != "X" {
		t.Errorf("an expectation header was restored or lost: %v", hs[1])
	}
	if dlq, _ := streamMsgs(t, js, "DLQ"); strings.Join(dlq, ",") != ",s" {
		t.Fatalf("DLQ stream after the second run: %q, want the payload-less letter and s", dlq)
	}
}

// Through a core ingress: each letter is a request the bridge answers after its park (or
// after dead-lettering it anew); a refusal for durability stops the run and leaves the
// letter (and the ones after it) in place.
func TestNATSCoreRequest(t *testing.T) {
	nc, js := natsSetup(t)
	got := make(chan natsgo.Header, 10)
	fakeBridge(t, nc, js, got)
	letter(t, js, "d", "x-target", "ok", "x-delay-id", "d1", "x-delay-original-Nats-Schedule", "@at 2030-01-01T00:00:00Z",
		"x-delay-error", "publish_failed: x")
	letter(t, js, "e", "x-target", "still.bad", "x-delay-error", "target_not_allowed: still.bad")
	letter(t, js, "f", "x-target", "ok", "x-delay-error", "publish_failed: y")
	letter(t, js, "g", "x-target", "flaky", "x-delay-error", "publish_failed: z")
	letter(t, js, "h", "x-target", "ok", "x-delay-error", "publish_failed: w")
	counts, err := NATS(t.Context(), nc, NATSConfig{DLQSubject: "delay.dlq", Ingress: "delay.in"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "could not store it durably: not_replicated") {
		t.Fatalf("err = %v, want the durability refusal", err)
	}
	// e: refused again (the bridge dead-letters it anew before answering): the old letter
	// goes, its new letter is at the end. g: not stored at all: the run stops, g and the
	// letters after it stay.
	checkCounts(t, "core", counts, map[string]Tally{"publish_failed": {Redriven: 2, Selected: 2},
		"target_not_allowed": {Refused: 1, Selected: 1}})
	if dlq, _ := streamMsgs(t, js, "DLQ"); strings.Join(dlq, ",") != "g,h,e" {
		t.Fatalf("DLQ stream: %q, want g and h left, and e's new letter", dlq)
	}
	if h := <-got; h.Get("Nats-Schedule") != "@at 2030-01-01T00:00:00Z" || h.Get("x-delay-original-Nats-Schedule") != "" {
		t.Errorf("through a core ingress the schedule header goes under its own name: %v", h)
	}
}

// fakeBridge answers requests on delay.in as the bridge does: x-target "ok" is parked (its
// headers go to got), "flaky" is refused for durability (nothing kept), any other target is
// dead-lettered anew (stored with the request's Nats-Msg-Id, as the bridge's dead letters
// are, so the DLQ stream drops a repeat within its window) before the error reply.
func fakeBridge(t *testing.T, nc *natsgo.Conn, js jetstream.JetStream, got chan<- natsgo.Header) {
	t.Helper()
	sub, err := nc.QueueSubscribe("delay.in", "delaybridge", func(m *natsgo.Msg) {
		if m.Header.Get("x-target") == "ok" {
			got <- m.Header
			_ = m.Respond([]byte(`{"id":"` + m.Header.Get("x-delay-id") + `","due":1}`))
			return
		}
		text := "target_not_allowed: " + m.Header.Get("x-target")
		if m.Header.Get("x-target") == "flaky" {
			text = "not_replicated: WAIT confirmed 0 of 1 replicas; retry the request"
		} else {
			dead := natsgo.NewMsg("delay.dlq")
			for k, v := range m.Header {
				dead.Header[k] = v
			}
			dead.Header.Set("x-delay-error", text)
			dead.Data = m.Data
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := js.PublishMsg(ctx, dead); err != nil {
				return // no reply: the request fails
			}
		}
		b, _ := json.Marshal(map[string]string{"error": text})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// Issue 23 item 4: letters refused again within the dead-letter stream's duplicate window
// (2 minutes). The stored letters carry the Nats-Msg-Id of their dead-letter publish; sent
// back with it, the bridge's new dead letter would carry it too and the stream would drop
// it as a duplicate, while the old letter is deleted: lost. Each refused letter must end up
// in the stream as a new letter, and the count of letters never drops.
func TestNATSRefusedInsideDuplicateWindow(t *testing.T) {
	nc, js := natsSetup(t)
	fakeBridge(t, nc, js, make(chan natsgo.Header, 10))
	for _, p := range []string{"a", "b", "c"} {
		letter(t, js, p, "Nats-Msg-Id", "dead-"+p, "x-delay", "30s", "x-delay-error", "missing_target: no x-target header")
	}
	counts, err := NATS(t.Context(), nc, NATSConfig{DLQSubject: "delay.dlq", Ingress: "delay.in"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "refused again", counts, map[string]Tally{"missing_target": {Refused: 3, Selected: 3}})
	dlq, hs := streamMsgs(t, js, "DLQ")
	if strings.Join(dlq, ",") != "a,b,c" {
		t.Fatalf("DLQ stream: %q, want a, b, c (the new letters)", dlq)
	}
	for i, h := range hs {
		if want := "DLQ:" + string(rune('1'+i)); h.Get("x-delay-redrive") != want {
			t.Errorf("new letter %d: x-delay-redrive %q, want %q (%v)", i, h.Get("x-delay-redrive"), want, h)
		}
	}
	// Once more, at once: the new letters are refused again too, and stay.
	counts, err = NATS(t.Context(), nc, NATSConfig{DLQSubject: "delay.dlq", Ingress: "delay.in"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, "refused again, twice", counts, map[string]Tally{"target_not_allowed": {Refused: 3, Selected: 3}})
	if dlq, _ := streamMsgs(t, js, "DLQ"); len(dlq) != 3 {
		t.Fatalf("DLQ stream after the second run: %q, want 3 letters", dlq)
	}
}

// Without a stream capturing the dead-letter subject there is nothing to redrive: a
// clear error, nothing published.
func TestNATSNoDLQStream(t *testing.T) {
	srv := testnats.Start(t)
	nc := testnats.Connect(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := NATS(ctx, nc, NATSConfig{DLQSubject: "delay.dlq", Ingress: "delay.in"}, Options{})
	if err == nil || !strings.Contains(err.Error(), "no JetStream stream captures the dead-letter subject") {
		t.Fatalf("err = %v", err)
	}
}

func checkCounts(t *testing.T, what string, got Counts, want map[string]Tally) {
	t.Helper()
	for r, w := range want {
		g := Tally{}
		if got[r] != nil {
			g = *got[r]
		}
		if g != w {
			t.Errorf("%s: %s = %+v, want %+v", what, r, g, w)
		}
	}
	for r, g := range got {
		if _, ok := want[r]; !ok {
			t.Errorf("%s: unexpected reason %s: %+v", what, r, *g)
		}
	}
}
