package e2e

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The tests in this file hold the built bridge to section 8 of the contract (listing,
// targets, bulk changes) the way an operator's tool would: raw HTTP and JSON with the
// contract's names (not this repository's client or wire types), and deliveries observed
// on the target subjects.

const opsToken = "ops-token"

// opsAPI is a raw HTTP client of the message API.
type opsAPI struct {
	t       *testing.T
	base    string
	token   string
	offTest bool // used off the test's goroutine (offTestGoroutine)
}

// offTestGoroutine returns a copy of o for a goroutine the test started: a failure there is
// reported with Errorf and ends that goroutine only (FailNow belongs to the test's own).
func (o *opsAPI) offTestGoroutine() *opsAPI {
	c := *o
	c.offTest = true
	return &c
}

func (o *opsAPI) fail(format string, args ...any) {
	o.t.Helper()
	if o.offTest {
		o.t.Errorf(format, args...)
		runtime.Goexit()
	}
	o.t.Fatalf(format, args...)
}

// listedMsg and listPage are GET /v1/messages' answer in the contract's names.
type listedMsg struct {
	ID       string `json:"id"`
	Target   string `json:"target"`
	Due      int64  `json:"due"`
	Attempts int    `json:"attempts"`
	Size     int    `json:"size"`
	Source   string `json:"source"`
}

type listPage struct {
	Messages   []listedMsg `json:"messages"`
	NextCursor *string     `json:"next_cursor"`
}

type targetRow struct {
	Target  string `json:"target"`
	Parked  int    `json:"parked"`
	NextDue *int64 `json:"next_due"`
}

type bulkAnswer struct {
	Matched int `json:"matched"`
	Changed int `json:"changed"`
}

func newOpsBridge(t *testing.T, s *stack, env ...string) *opsAPI {
	t.Helper()
	env = append(env, "BRIDGE_API_TOKEN", opsToken)
	e := maps.Clone(s.env)
	for i := 0; i+1 < len(env); i += 2 {
		e[env[i]] = env[i+1]
	}
	b := startBridge(t, e)
	return &opsAPI{t: t, base: "http://" + b.APIAddr, token: opsToken}
}

// call sends a request and returns the status and body; body is JSON-encoded unless it is
// a string (sent as is).
func (o *opsAPI) call(method, path string, body any) (int, []byte) {
	o.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			o.fail("%v", err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(o.t.Context(), method, o.base+path, rd)
	if err != nil {
		o.fail("%v", err)
	}
	if o.token != "" {
		req.Header.Set("Authorization", "Bearer "+o.token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		o.fail("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		o.fail("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, raw
}

// ok sends a request that must answer want and decodes its body into out.
func (o *opsAPI) ok(method, path string, body any, want int, out any) {
	o.t.Helper()
	code, raw := o.call(method, path, body)
	if code != want {
		o.fail("%s %s: %d %s, want %d", method, path, code, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			o.fail("%s %s: answer %s: %v", method, path, raw, err)
		}
	}
}

// park posts a message for target due after delay and returns its due time.
func (o *opsAPI) park(id, target string, delay time.Duration) int64 {
	o.t.Helper()
	return o.post(id, target, "delay", delay.Milliseconds())
}

// post posts a message for target with the given time field (delay or deliver_at) and
// returns its due time.
func (o *opsAPI) post(id, target, field string, value any) int64 {
	o.t.Helper()
	var res struct {
		ID  string `json:"id"`
		Due int64  `json:"due"`
	}
	o.ok("POST", "/v1/messages", map[string]any{"id": id, "target": target, field: value, "payload": "body of " + id}, http.StatusCreated, &res)
	if res.ID != id || res.Due == 0 {
		o.fail("park %s: answer %+v", id, res)
	}
	return res.Due
}

func (o *opsAPI) list(query url.Values) listPage {
	o.t.Helper()
	var p listPage
	o.ok("GET", "/v1/messages?"+query.Encode(), nil, http.StatusOK, &p)
	return p
}

// listAll follows next_cursor to the end (pause between pages) and returns every message.
func (o *opsAPI) listAll(query url.Values, pause time.Duration) []listedMsg {
	o.t.Helper()
	var all []listedMsg
	for {
		p := o.list(query)
		all = append(all, p.Messages...)
		if p.NextCursor == nil {
			return all
		}
		query.Set("cursor", *p.NextCursor)
		time.Sleep(pause)
	}
}

func (o *opsAPI) targets() []targetRow {
	o.t.Helper()
	var res struct {
		Targets []targetRow `json:"targets"`
	}
	o.ok("GET", "/v1/targets", nil, http.StatusOK, &res)
	return res.Targets
}

func (o *opsAPI) bulk(op string, req map[string]any) bulkAnswer {
	o.t.Helper()
	var res bulkAnswer
	o.ok("POST", "/v1/bulk/"+op, req, http.StatusOK, &res)
	return res
}

func ids(ms []listedMsg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// inDueOrder reports the first pair of messages out of (due, id) order.
func inDueOrder(ms []listedMsg) error {
	for i := 1; i < len(ms); i++ {
		a, b := ms[i-1], ms[i]
		if cmp.Or(cmp.Compare(a.Due, b.Due), cmp.Compare(a.ID, b.ID)) >= 0 {
			return fmt.Errorf("%s (due %d) listed before %s (due %d)", a.ID, a.Due, b.ID, b.Due)
		}
	}
	return nil
}

// TestOperatorListAndTargets: GET /v1/messages and GET /v1/targets of the built bridge
// against the messages it was given: the fields, due order, the default and largest
// limit, globs on the bare name and on broker:name, due ranges in unix ms and RFC 3339,
// the counts and next due per target, most parked first, and bad input.
func TestOperatorListAndTargets(t *testing.T) {
	s := newStack(t)
	o := newOpsBridge(t, s)
	a, b, c := s.name("ops.a"), s.name("ops.b"), s.name("ops.c")
	due := map[string]int64{}
	parkN := func(target, prefix string, n int, step time.Duration) {
		for i := range n {
			id := fmt.Sprintf("%s-%03d", prefix, i)
			due[id] = o.park(id, target, time.Hour+time.Duration(i)*step)
		}
	}
	parkN(a, "a", 150, 7*time.Second)
	parkN(b, "b", 40, 11*time.Second)
	parkN(c, "c", 10, 13*time.Second)

	t.Run("targets", func(t *testing.T) {
		rows := o.targets()
		want := []struct {
			target string
			parked int
			first  string
		}{{a, 150, "a-000"}, {b, 40, "b-000"}, {c, 10, "c-000"}}
		if len(rows) != len(want) {
			t.Fatalf("targets %+v, want %d rows", rows, len(want))
		}
		for i, w := range want {
			r := rows[i]
			if r.Target != "nats:"+w.target || r.Parked != w.parked || r.NextDue == nil || *r.NextDue != due[w.first] {
				t.Fatalf("targets[%d] = %+v (next_due %v), want nats:%s, %d parked, next_due %d", i, r, r.NextDue, w.target, w.parked, due[w.first])
			}
		}
	})

	t.Run("all in due order", func(t *testing.T) {
		page := o.list(url.Values{})
		if len(page.Messages) != 100 || page.NextCursor == nil {
			t.Fatalf("default page: %d messages, next_cursor %v; want 100 and a cursor", len(page.Messages), page.NextCursor)
		}
		all := o.list(url.Values{"limit": {"1000"}})
		if len(all.Messages) != 200 || all.NextCursor != nil {
			t.Fatalf("limit 1000: %d messages, next_cursor %v; want 200 and null", len(all.Messages), all.NextCursor)
		}
		if err := inDueOrder(all.Messages); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(page.Messages), ids(all.Messages[:100])) {
			t.Fatal("the default page is not the first 100 of the whole list")
		}
		for _, m := range all.Messages {
			tg := map[byte]string{'a': a, 'b': b, 'c': c}[m.ID[0]]
			if m.Due != due[m.ID] || m.Target != "nats:"+tg || m.Source != "http" || m.Attempts != 0 || m.Size != len("body of "+m.ID) {
				t.Fatalf("listed %+v, want due %d target nats:%s source http attempts 0 size %d", m, due[m.ID], tg, len("body of "+m.ID))
			}
		}
		code, raw := o.call("GET", "/v1/messages?limit=1000", nil)
		var generic map[string]any
		if err := json.Unmarshal(raw, &generic); code != http.StatusOK || err != nil {
			t.Fatalf("%d %s", code, raw)
		}
		if v, present := generic["next_cursor"]; !present || v != nil {
			t.Fatalf("last page: next_cursor %v (present %v), want null", v, present)
		}
	})

	t.Run("globs", func(t *testing.T) {
		for pattern, want := range map[string]int{
			b: 40, "nats:" + b: 40, s.name("ops.*"): 200, "*.c": 10, "nats:*": 200, "kafka:*": 0, "*.nothing": 0,
		} {
			got := o.listAll(url.Values{"target": {pattern}, "limit": {"17"}}, 0)
			if len(got) != want {
				t.Fatalf("target=%s: %d messages, want %d", pattern, len(got), want)
			}
			if err := inDueOrder(got); err != nil {
				t.Fatalf("target=%s paged by 17: %v", pattern, err)
			}
		}
	})

	t.Run("due range", func(t *testing.T) {
		from, to := due["a-010"]+1, due["a-040"]+1 // a-011 .. a-040 and the b and c between
		var want []string
		for id, d := range due {
			if d >= from && d <= to {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		ms := url.Values{"due_from": {strconv.FormatInt(from, 10)}, "due_to": {strconv.FormatInt(to, 10)}}
		zone := time.FixedZone("", 2*3600)
		rfc := url.Values{"due_from": {time.UnixMilli(from).In(zone).Format(time.RFC3339Nano)},
			"due_to": {time.UnixMilli(to).In(zone).Format(time.RFC3339Nano)}}
		for _, q := range []url.Values{ms, rfc} {
			got := ids(o.listAll(q, 0))
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("%v: %d messages %v, want %d", q, len(got), got, len(want))
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, q := range []string{"limit=0", "limit=5000", "limit=ten", "target=%5Bx", "due_from=yesterday",
			"due_to=2026-13-01T00:00:00Z", "cursor=not-a-cursor", "due_from=2000&due_to=1000"} {
			code, raw := o.call("GET", "/v1/messages?"+q, nil)
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(raw, &e); code != http.StatusBadRequest || err != nil || e.Error == "" {
				t.Errorf("?%s: %d %s, want 400 with an error", q, code, raw)
			}
		}
	})
}

// TestOperatorNeedsTheToken: every section 8 route, the console's page included, answers
// 401 without the token or with a wrong one, and changes nothing; the page is 200 with it.
func TestOperatorNeedsTheToken(t *testing.T) {
	s := newStack(t)
	o := newOpsBridge(t, s)
	kept := o.park("kept", s.name("ops.auth"), time.Hour)
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/messages", ""}, {"GET", "/v1/targets", ""},
		{"POST", "/v1/bulk/cancel", `{"target":"*"}`}, {"POST", "/v1/bulk/reschedule", `{"target":"*","shift":"+1h"}`},
		{"POST", "/v1/bulk/deliver-now", `{"target":"*"}`}, {"GET", "/ui/", ""},
	}
	for _, token := range []string{"", "wrong"} {
		bad := &opsAPI{t: t, base: o.base, token: token}
		for _, r := range routes {
			if code, raw := bad.call(r.method, r.path, r.body); code != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d %s, want 401", r.method, r.path, token, code, raw)
			}
		}
	}
	if got := o.list(url.Values{}); len(got.Messages) != 1 || got.Messages[0].Due != kept {
		t.Fatalf("after the refused requests: %+v, want the one message unchanged", got.Messages)
	}
	if code, page := o.call("GET", "/ui/", nil); code != http.StatusOK || !bytes.Contains(page, []byte("<title>delaybridge console</title>")) {
		t.Fatalf("GET /ui/ with the token: %d %.80s", code, page)
	}
}

// TestOperatorBulk: bulk cancel, reschedule (deliver_at, shift) and deliver-now through
// the built bridge, with their dry runs, checked through the API and at the targets:
// cancelled messages never arrive, moved ones arrive once at their new due, not before.
func TestOperatorBulk(t *testing.T) {
	s := newStack(t)
	o := newOpsBridge(t, s)
	cancelT, atT, shiftT, nowT := s.name("bulk.cancel"), s.name("bulk.at"), s.name("bulk.shift"), s.name("bulk.now")
	due := map[string]int64{}
	for i := range 20 {
		for _, tg := range []string{cancelT, atT, shiftT, nowT} {
			id := fmt.Sprintf("%s-%02d", tg, i)
			due[id] = o.park(id, tg, time.Hour+time.Duration(i)*time.Minute)
		}
	}
	arrivals := map[string]chan arrival{}
	for _, tg := range []string{cancelT, atT, shiftT, nowT} {
		arrivals[tg] = subscribe(t, s.nc, tg)
	}

	if r := o.bulk("cancel", map[string]any{"target": cancelT, "dry_run": true}); r != (bulkAnswer{20, 0}) {
		t.Fatalf("dry-run cancel: %+v, want matched 20 changed 0", r)
	}
	if n := len(o.listAll(url.Values{"target": {cancelT}}, 0)); n != 20 {
		t.Fatalf("after a dry run %d messages are listed, want 20", n)
	}
	if r := o.bulk("cancel", map[string]any{"target": cancelT, "due_to": due[cancelT+"-09"]}); r != (bulkAnswer{10, 10}) {
		t.Fatalf("cancel of the first 10: %+v", r)
	}
	for i := range 20 {
		id := fmt.Sprintf("%s-%02d", cancelT, i)
		if code, _ := o.call("GET", "/v1/messages/"+url.PathEscape(id), nil); (code == http.StatusNotFound) != (i < 10) {
			t.Fatalf("GET %s after the cancel: %d", id, code)
		}
	}

	// shift: the messages due in 1h+i min move by exactly -1h+2s, to about 2 s + i min from now.
	if r := o.bulk("reschedule", map[string]any{"target": shiftT, "due_to": due[shiftT+"-00"], "shift": "-59m58s"}); r != (bulkAnswer{1, 1}) {
		t.Fatalf("shift: %+v", r)
	}
	var got struct {
		Due int64 `json:"due"`
	}
	o.ok("GET", "/v1/messages/"+url.PathEscape(shiftT+"-00"), nil, http.StatusOK, &got)
	if want := due[shiftT+"-00"] - (59*time.Minute + 58*time.Second).Milliseconds(); got.Due != want {
		t.Fatalf("shifted due %d, want %d", got.Due, want)
	}
	due[shiftT+"-00"] = got.Due

	// deliver_at (RFC 3339 with an offset) for the whole target, deliver-now for half of one.
	at := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	if r := o.bulk("reschedule", map[string]any{"target": atT, "deliver_at": at.In(time.FixedZone("", -5*3600)).Format(time.RFC3339Nano)}); r != (bulkAnswer{20, 20}) {
		t.Fatalf("deliver_at: %+v", r)
	}
	if r := o.bulk("deliver-now", map[string]any{"target": nowT, "due_from": due[nowT+"-10"]}); r != (bulkAnswer{10, 10}) {
		t.Fatalf("deliver-now: %+v", r)
	}

	expectArrivals(t, arrivals[atT], 20, func(id string) int64 { return at.UnixMilli() })
	expectArrivals(t, arrivals[shiftT], 1, func(id string) int64 { return due[id] })
	expectArrivals(t, arrivals[nowT], 10, func(id string) int64 { return 0 })
	for tg, want := range map[string]int{cancelT: 10, atT: 0, shiftT: 19, nowT: 10} {
		if n := len(o.listAll(url.Values{"target": {tg}}, 0)); n != want {
			t.Errorf("%s: %d parked after the changes, want %d", tg, n, want)
		}
	}
	select {
	case a := <-arrivals[cancelT]:
		t.Fatalf("a message of the cancelled target arrived: %s", a.msg.Header.Get("x-delay-id"))
	case <-time.After(500 * time.Millisecond):
	}
}

// expectArrivals receives n messages, each once and none before notBefore(id) nor before
// its x-delay-due; then nothing more for a moment.
func expectArrivals(t *testing.T, ch chan arrival, n int, notBefore func(id string) int64) {
	t.Helper()
	seen := map[string]bool{}
	for range n {
		a := receive(t, ch, 30*time.Second)
		id := a.msg.Header.Get("x-delay-id")
		hdrDue, _ := strconv.ParseInt(a.msg.Header.Get("x-delay-due"), 10, 64)
		switch {
		case seen[id]:
			t.Fatalf("%s arrived twice", id)
		case a.at.UnixMilli() < max(notBefore(id), hdrDue):
			t.Fatalf("%s arrived %d ms early", id, max(notBefore(id), hdrDue)-a.at.UnixMilli())
		}
		seen[id] = true
	}
	select {
	case a := <-ch:
		t.Fatalf("one more arrived: %s", a.msg.Header.Get("x-delay-id"))
	case <-time.After(300 * time.Millisecond):
	}
}

// TestOperatorUnderDelivery: paging and bulk shifts while the bridge delivers and new
// messages come in. Listing: no message twice, the whole walk in due order, every
// message parked throughout seen. Bulk: each message arrives exactly once, never before
// its due; its x-delay-due is its first due plus a whole number of shifts, and those
// numbers add up to the changed counts the bulk requests answered (a message claimed for
// delivery is not changed).
func TestOperatorUnderDelivery(t *testing.T) {
	s := newStack(t)
	flow, stay := s.name("live.flow"), s.name("live.stay")
	// A rate below the flow's keeps many messages in delivery (claimed, waiting for their
	// slot) while the shifts run: those must be left alone.
	o := newOpsBridge(t, s, "BRIDGE_TARGET_RATE", flow+"=100/s")
	arrivals := subscribe(t, s.nc, flow)
	for i := range 100 {
		o.park(fmt.Sprintf("s%03d", i), stay, time.Hour+time.Duration(i)*time.Second)
	}
	first := map[string]int64{}
	// The flow spans 4 s at the target's rate, so most of it is still ahead when the
	// shifts begin even if parking the 400 took longer than the lead (a loaded CI
	// machine): the shifts then race delivery instead of finding everything claimed.
	const n = 400
	start := time.Now().Add(2 * time.Second)
	for i := range n {
		id := fmt.Sprintf("f%03d", i)
		first[id] = o.post(id, flow, "deliver_at", start.Add(time.Duration(i)*10*time.Millisecond).UnixMilli())
	}

	var wg sync.WaitGroup
	var walk []listedMsg
	walker, parker := o.offTestGoroutine(), o.offTestGoroutine()
	wg.Go(func() {
		walk = walker.listAll(url.Values{"target": {s.name("live.*")}, "limit": {"15"}}, 50*time.Millisecond)
	})
	wg.Go(func() {
		for i := range 50 {
			parker.park(fmt.Sprintf("new%03d", i), stay, 2*time.Hour)
			time.Sleep(20 * time.Millisecond)
		}
	})
	time.Sleep(time.Until(start))
	const shift = 100 * time.Millisecond
	changed := 0
	for range 10 {
		r := o.bulk("reschedule", map[string]any{"target": flow, "shift": "+" + shift.String()})
		changed += r.Changed
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	seen := map[string]bool{}
	for _, m := range walk {
		if seen[m.ID] && m.ID[0] == 's' {
			t.Fatalf("%s listed twice while paging", m.ID)
		}
		seen[m.ID] = true
	}
	for i := range 100 {
		if id := fmt.Sprintf("s%03d", i); !seen[id] {
			t.Fatalf("%s, parked throughout, not seen by the walk (%d listed)", id, len(walk))
		}
	}

	shifts := 0
	got := map[string]bool{}
	for range n {
		a := receive(t, arrivals, 30*time.Second)
		id := a.msg.Header.Get("x-delay-id")
		hdrDue, _ := strconv.ParseInt(a.msg.Header.Get("x-delay-due"), 10, 64)
		moved := hdrDue - first[id]
		switch {
		case got[id]:
			t.Fatalf("%s arrived twice", id)
		case a.at.UnixMilli() < hdrDue:
			t.Fatalf("%s arrived %d ms before its due", id, hdrDue-a.at.UnixMilli())
		case moved < 0 || moved%shift.Milliseconds() != 0:
			t.Fatalf("%s: due %d is not its first due %d plus whole shifts", id, hdrDue, first[id])
		}
		got[id] = true
		shifts += int(moved / shift.Milliseconds())
	}
	if shifts != changed {
		t.Fatalf("deliveries carry %d shifts, the bulk requests answered %d changed", shifts, changed)
	}
	if changed == 0 {
		t.Fatal("no bulk shift changed anything: the test did not race delivery")
	}
	t.Logf("%d delivered, %d shifts applied, %d listed by the walk", n, changed, len(walk))
}
