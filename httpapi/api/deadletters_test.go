package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/events"
	"github.com/delaybridge/delaybridge/internal/redrive"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// hookRecord is a RedriveHook that keeps what it was told.
type hookRecord struct {
	mu  sync.Mutex
	ops []string
	// live is a tail of the API's event hub: the changed events it emitted.
	live *events.Sub
}

// changed drains the live tail: "op count" of each changed event emitted so far.
func (h *hookRecord) changed() []string {
	var out []string
	for {
		select {
		case e := <-h.live.Events():
			out = append(out, fmt.Sprintf("%s %d", e.Op, e.Count))
		default:
			return out
		}
	}
}

func (h *hookRecord) Begin(r *http.Request, op RedriveOp) func(RedriveOutcome) {
	return func(o RedriveOutcome) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.ops = append(h.ops, fmt.Sprintf("%s %s %s dry=%t matched=%d changed=%d err=%v", op.Op, op.Broker, op.Selector, op.DryRun, o.Matched, o.Changed, o.Err))
	}
}

// deadLetterAPI serves the message API with the dead letters of an embedded NATS server
// (stream DLQ on delay.dlq, n letters: every third expired, the others publish_failed),
// and a core ingress on delay.in that answers as the bridge does and records the payloads
// it took.
func deadLetterAPI(t *testing.T, n int) (*client.Client, *hookRecord, func() []string) {
	return deadLetterAPIBudget(t, n, 0)
}

// deadLetterAPIBudget is deadLetterAPI with a redrive budget (0: the default).
func deadLetterAPIBudget(t *testing.T, n int, budget time.Duration) (*client.Client, *hookRecord, func() []string) {
	t.Helper()
	c, hook, took, _ := deadLetterServer(t, n, budget)
	return c, hook, took
}

// deadLetterServer is deadLetterAPIBudget, with the connection to the NATS server.
func deadLetterServer(t *testing.T, n int, budget time.Duration) (*client.Client, *hookRecord, func() []string, *natsgo.Conn) {
	t.Helper()
	srv := testnats.Start(t)
	nc := testnats.Connect(t, srv.URL())
	testnats.CreateStream(t, nc, "DLQ", "delay.dlq")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		reason := "publish_failed"
		if i%3 == 0 {
			reason = "expired"
		}
		m := natsgo.NewMsg("delay.dlq")
		m.Header.Set("x-target", fmt.Sprintf("out.%d", i))
		m.Header.Set("x-delay-error", reason+": letter "+fmt.Sprint(i))
		m.Data = []byte(fmt.Sprint(i))
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var took []string
	sub, err := nc.Subscribe("delay.in", func(m *natsgo.Msg) {
		mu.Lock()
		took = append(took, string(m.Data))
		mu.Unlock()
		_ = m.Respond([]byte(`{"id":"x","due":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	hub := events.NewHub(nil)
	live, err := hub.Tail()
	if err != nil {
		t.Fatal(err)
	}
	hook := &hookRecord{live: live}
	st := storetest.New(t, time.Second)
	h := New(Config{
		Rules:         intake.Rules{MaxDelay: 24 * time.Hour, MaxPayload: 64, Targets: intake.TargetPolicy{Brokers: map[string]bool{"nats": true}, Allow: []string{"*"}}},
		DefaultBroker: "nats",
		DeadLetters:   map[string]DeadLetters{"nats": redrive.NATSLetters{Conn: nc, Config: redrive.NATSConfig{DLQSubject: "delay.dlq", Ingress: "delay.in"}}},
		RedriveHook:   hook,
		Events:        hub,
		redriveBudget: budget,
	}, st, adminOf(t, st), nil)
	hs := serveAPI(t, h)
	return &client.Client{Base: hs.URL, HTTP: hs.Client}, hook, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(took)
	}, nc
}

// allLetters pages through GET /v1/dead-letters with query and returns the ids.
func allLetters(t *testing.T, c *client.Client, query url.Values) []string {
	t.Helper()
	var ids []string
	q := maps(query)
	for range 1000 {
		res, err := c.DeadLetters(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res.DeadLetters {
			ids = append(ids, d.ID)
		}
		if res.NextCursor == nil {
			return ids
		}
		q.Set("cursor", *res.NextCursor)
	}
	t.Fatal("paging does not end")
	return nil
}

func maps(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

func seqs(from, to, step int) []string {
	var out []string
	for i := from; i <= to; i += step {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

// GET /v1/dead-letters pages through the dead-letter stream (limit bounded), filters by a
// checked reason, describes each letter; bad parameters are 400.
func TestDeadLettersList(t *testing.T) {
	c, _, _ := deadLetterAPI(t, 25)
	if got := allLetters(t, c, url.Values{"limit": {"7"}}); !slices.Equal(got, seqs(1, 25, 1)) {
		t.Fatalf("all: %v", got)
	}
	if got := allLetters(t, c, url.Values{"limit": {"2"}, "reason": {"expired"}}); !slices.Equal(got, seqs(1, 25, 3)) {
		t.Fatalf("expired: %v", got)
	}
	res, err := c.DeadLetters(t.Context(), url.Values{"limit": {"2"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.DeadLetters[1]; d.ID != "2" || d.Reason != "publish_failed" || d.Error != "publish_failed: letter 1" || d.Target != "out.1" || d.Size != 1 || d.At <= 0 {
		t.Fatalf("letter 2: %+v", d)
	}
	for _, q := range []url.Values{
		{"limit": {"0"}}, {"limit": {"1001"}}, {"limit": {"x"}}, {"reason": {"Expired"}}, {"reason": {"a;b"}},
		{"reason": {strings.Repeat("a", 65)}}, {"what": {"1"}}, {"reason": {"a", "b"}}, {"broker": {"kafka"}},
	} {
		var apiErr *client.APIError
		if _, err := c.DeadLetters(t.Context(), q); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
			t.Errorf("%v: %v, want 400", q, err)
		}
	}
}

// A cursor of GET /v1/dead-letters is sealed: altered, made up, unsealed positions,
// cursors of another reason or of GET /v1/messages are 400 invalid_cursor.
func TestDeadLettersForgedCursors(t *testing.T) {
	c, _, _ := deadLetterAPI(t, 10)
	res, err := c.DeadLetters(t.Context(), url.Values{"limit": {"2"}, "reason": {"publish_failed"}})
	if err != nil || res.NextCursor == nil {
		t.Fatalf("first page: %+v %v", res, err)
	}
	good := *res.NextCursor
	raw, mac, _ := strings.Cut(good, ".")
	for name, q := range map[string]url.Values{
		"unsealed position": {"cursor": {"5"}},
		"made up":           {"cursor": {"bm9wZQ.bm9wZQ"}},
		"altered position":  {"cursor": {"MQ." + mac}, "reason": {"publish_failed"}},
		"altered mac":       {"cursor": {raw + ".AAAA" + mac[4:]}, "reason": {"publish_failed"}},
		"another reason":    {"cursor": {good}, "reason": {"expired"}},
		"no reason":         {"cursor": {good}},
	} {
		_, err := c.DeadLetters(t.Context(), q)
		wantInvalidCursor(t, name, err)
	}
	// A cursor of the message list is not a dead-letter cursor, nor the reverse.
	if _, err := c.Send(t.Context(), httpapi.PostRequest{Target: "a.b", Delay: []byte(`"1h"`), ID: "m1", Payload: str("p")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(t.Context(), httpapi.PostRequest{Target: "a.b", Delay: []byte(`"2h"`), ID: "m2", Payload: str("p")}); err != nil {
		t.Fatal(err)
	}
	lr, err := c.List(t.Context(), url.Values{"limit": {"1"}})
	if err != nil || lr.NextCursor == nil {
		t.Fatalf("message list: %+v %v", lr, err)
	}
	_, err = c.DeadLetters(t.Context(), url.Values{"cursor": {*lr.NextCursor}})
	wantInvalidCursor(t, "a message-list cursor", err)
	_, err = c.List(t.Context(), url.Values{"cursor": {good}})
	wantInvalidCursor(t, "a dead-letter cursor on the message list", err)
	if res, err := c.DeadLetters(t.Context(), url.Values{"cursor": {good}, "reason": {"publish_failed"}, "limit": {"100"}}); err != nil || len(res.DeadLetters) != 4 {
		t.Fatalf("the real cursor: %+v %v", res, err)
	}
}

// POST /v1/dead-letters/redrive: a dry run counts by reason and sends nothing; a redrive
// by reason then by ids sends exactly those, once; bad bodies are 400; the hook hears
// each redrive.
func TestDeadLettersRedrive(t *testing.T) {
	c, hook, took := deadLetterAPI(t, 12)
	dry, err := c.Redrive(t.Context(), httpapi.RedriveRequest{Reason: "expired", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Matched != 4 || dry.Changed != 0 || dry.ByReason["expired"].Selected != 4 || dry.ByReason["publish_failed"].Left != 8 || len(took()) != 0 {
		t.Fatalf("dry run: %+v, ingress took %v", dry, took())
	}
	res, err := c.Redrive(t.Context(), httpapi.RedriveRequest{Reason: "expired"})
	if err != nil || res.Matched != 4 || res.Changed != 4 || res.ByReason["expired"].Redriven != 4 {
		t.Fatalf("by reason: %+v %v", res, err)
	}
	res, err = c.Redrive(t.Context(), httpapi.RedriveRequest{IDs: []string{"2", "3", "1", "99"}})
	if err != nil || res.Changed != 2 || res.ByReason[redrive.ReasonNotFound].Other != 2 {
		t.Fatalf("by ids: %+v %v", res, err)
	}
	got := took()
	slices.Sort(got)
	if strings.Join(got, ",") != "0,1,2,3,6,9" {
		t.Fatalf("the ingress took %v, want 0, 3, 6, 9 (expired) and 1, 2 (ids 2, 3)", got)
	}
	if left := allLetters(t, c, url.Values{}); strings.Join(left, ",") != "5,6,8,9,11,12" {
		t.Fatalf("left: %v", left)
	}
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprint(i + 1)
	}
	for name, req := range map[string]httpapi.RedriveRequest{
		"neither":   {},
		"both":      {Reason: "expired", IDs: []string{"1"}},
		"bad id":    {IDs: []string{"1", "x"}},
		"id 0":      {IDs: []string{"0"}},
		"id 01":     {IDs: []string{"01"}},
		"bad code":  {Reason: "EXPIRED"},
		"too many":  {IDs: many},
		"no broker": {Reason: "expired", Broker: "kafka"},
	} {
		var apiErr *client.APIError
		if _, err := c.Redrive(t.Context(), req); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
			t.Errorf("%s: %v, want 400", name, err)
		}
	}
	code, body := rawCall(t, c, "POST", "/v1/dead-letters/redrive", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, `{"reason":"publish_failed"}`)
	if code != http.StatusForbidden {
		t.Errorf("cross-site redrive = %d %s, want 403", code, body)
	}
	code, body = rawCall(t, c, "POST", "/v1/dead-letters/redrive", map[string]string{"Content-Type": "text/plain"}, `{"reason":"publish_failed"}`)
	if code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain redrive = %d %s, want 415", code, body)
	}
	if n := len(took()); n != 6 {
		t.Fatalf("the refused requests sent letters: the ingress took %d", n)
	}
	if got := hook.changed(); strings.Join(got, ",") != "redrive 4,redrive 2" {
		t.Fatalf("changed events %v, want one per redrive that sent letters (4, then 2)", got)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	want := []string{
		"redrive nats reason=expired dry=true matched=4 changed=0 err=<nil>",
		"redrive nats reason=expired dry=false matched=4 changed=4 err=<nil>",
		"redrive nats ids=1,2,3,99 dry=false matched=2 changed=2 err=<nil>",
	}
	if !slices.Equal(hook.ops, want) {
		t.Fatalf("hook heard:\n%s\nwant:\n%s", strings.Join(hook.ops, "\n"), strings.Join(want, "\n"))
	}
	// The audit log has the three redrives, newest first; the refused requests none.
	log, err := c.Audit(t.Context(), 10, "")
	if err != nil {
		t.Fatal(err)
	}
	var heard []string
	for _, e := range log.Entries {
		heard = append(heard, fmt.Sprintf("%s %s dry=%v matched=%d changed=%d %s", e.Op, e.Selector, e.DryRun, e.Matched, e.Changed, e.State))
	}
	wantLog := []string{
		`redrive {"broker":"nats","ids":["2","3","1","99"]} dry=false matched=2 changed=2 done`,
		`redrive {"broker":"nats","reason":"expired"} dry=false matched=4 changed=4 done`,
		`redrive {"broker":"nats","reason":"expired"} dry=true matched=4 changed=0 done`,
	}
	if !slices.Equal(heard, wantLog) {
		t.Fatalf("audit log:\n%s\nwant:\n%s", strings.Join(heard, "\n"), strings.Join(wantLog, "\n"))
	}
}

// Four redrives of one reason at once through the API send each letter once.
func TestDeadLettersRedriveConcurrent(t *testing.T) {
	c, _, took := deadLetterAPI(t, 150)
	var wg sync.WaitGroup
	changed := make([]int, 4)
	for i := range changed {
		wg.Go(func() {
			res, err := c.Redrive(t.Context(), httpapi.RedriveRequest{Reason: "publish_failed"})
			if err != nil {
				t.Error(err)
			}
			changed[i] = res.Changed
		})
	}
	wg.Wait()
	got := took()
	sum := 0
	for _, n := range changed {
		sum += n
	}
	slices.Sort(got)
	if sum != 100 || len(got) != 100 || len(slices.Compact(got)) != 100 {
		t.Fatalf("four redrives at once: changed %v, the ingress took %d letters (%d distinct); want 100 once each", changed, len(got), len(slices.Compact(slices.Clone(got))))
	}
}

// A redrive that reaches its time limit answers more: true, having sent nothing past it;
// the letters it did not look at stay listed.
func TestDeadLettersRedriveTimeLimit(t *testing.T) {
	c, hook, took := deadLetterAPIBudget(t, 5, time.Nanosecond)
	res, err := c.Redrive(t.Context(), httpapi.RedriveRequest{Reason: "publish_failed"})
	if err != nil || !res.More || res.Changed != 0 || len(took()) != 0 {
		t.Fatalf("at the limit: %+v %v; the ingress took %v", res, err, took())
	}
	if left := allLetters(t, c, url.Values{}); len(left) != 5 {
		t.Fatalf("letters left: %v", left)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.ops) != 1 || !strings.HasSuffix(hook.ops[0], "matched=0 changed=0 err=<nil>") {
		t.Fatalf("hook heard %v", hook.ops)
	}
}

// With two dead-letter stores, broker chooses one (default: the default broker), and a
// cursor of one is refused on the other. (Both stores are NATS here: what is tested is the
// routing and the sealing, not Kafka.)
func TestDeadLettersTwoBrokers(t *testing.T) {
	store := func(n int) DeadLetters {
		srv := testnats.Start(t)
		nc := testnats.Connect(t, srv.URL())
		testnats.CreateStream(t, nc, "DLQ", "delay.dlq")
		for range n {
			m := natsgo.NewMsg("delay.dlq")
			m.Header.Set("x-delay-error", "expired: x")
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return redrive.NATSLetters{Conn: nc, Config: redrive.NATSConfig{DLQSubject: "delay.dlq", Ingress: "delay.in"}}
	}
	st := storetest.New(t, time.Second)
	h := New(Config{DefaultBroker: "nats", DeadLetters: map[string]DeadLetters{"nats": store(3), "kafka": store(5)}}, st, adminOf(t, st), nil)
	hs := serveAPI(t, h)
	c := &client.Client{Base: hs.URL, HTTP: hs.Client}
	for broker, want := range map[string]int{"": 3, "nats": 3, "kafka": 5} {
		q := url.Values{"limit": {"1000"}}
		if broker != "" {
			q.Set("broker", broker)
		}
		if res, err := c.DeadLetters(t.Context(), q); err != nil || len(res.DeadLetters) != want {
			t.Errorf("broker %q: %d letters, %v; want %d", broker, len(res.DeadLetters), err, want)
		}
	}
	res, err := c.DeadLetters(t.Context(), url.Values{"limit": {"1"}, "broker": {"nats"}})
	if err != nil || res.NextCursor == nil {
		t.Fatalf("first page: %+v %v", res, err)
	}
	_, err = c.DeadLetters(t.Context(), url.Values{"limit": {"1"}, "broker": {"kafka"}, "cursor": {*res.NextCursor}})
	wantInvalidCursor(t, "a nats cursor on kafka", err)
	if _, err := c.DeadLetters(t.Context(), url.Values{"limit": {"1"}, "cursor": {*res.NextCursor}}); err != nil {
		t.Errorf("the nats cursor on the default broker: %v", err)
	}
}
