package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

// TestRescheduleToMaxInt64Refused is issue 23's reproduction: {"id":"big1","deliver_at":
// 9223372036854775807} answered changed 1 and the message was published at once with
// x-delay-due -9223372036854775808. Now it is a 400 and the message is untouched; so are a
// deliver_at and a shift beyond BRIDGE_MAX_DELAY (24h here), from a selector too.
func TestRescheduleToMaxInt64Refused(t *testing.T) {
	c, _ := newAPI(t, "")
	ctx := context.Background()
	sent, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.timeout", Delay: []byte(`"1h"`), ID: "big1", Payload: str("x")})
	if err != nil {
		t.Fatal(err)
	}
	in25h := strconv.FormatInt(time.Now().Add(25*time.Hour).UnixMilli(), 10)
	for _, req := range []httpapi.BulkRequest{
		{ID: "big1", DeliverAt: []byte(`9223372036854775807`)},
		{ID: "big1", DeliverAt: []byte(`"9223372036854775807"`)},
		{Target: "orders.*", DeliverAt: []byte(`9223372036854775807`)},
		{ID: "big1", DeliverAt: []byte(`"9999-12-31T23:59:59.999999999Z"`)},
		{ID: "big1", DeliverAt: []byte(in25h)},
		{ID: "big1", Shift: "+25h"},
		{ID: "big1", Shift: "-25h"},
		{ID: "big1", Shift: "+2562047h47m16.854775807s"},
		{ID: "big1", Shift: "+2562047h47m16.854775808s"}, // overflows a Duration
	} {
		res, err := c.Bulk(ctx, "reschedule", req)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
			t.Errorf("reschedule %s: %+v, %v; want 400", body(req), res, err)
		}
	}
	m, err := c.Get(ctx, "big1")
	if err != nil || m.Due != sent.Due {
		t.Fatalf("big1 after the refused reschedules: due %d, want %d untouched (%v)", m.Due, sent.Due, err)
	}
	res, err := c.Bulk(ctx, "reschedule", httpapi.BulkRequest{ID: "big1", Shift: "+23h"})
	if err != nil || res.Changed != 1 {
		t.Fatalf("a shift within the maximum: %+v, %v", res, err)
	}
	res, err = c.Bulk(ctx, "reschedule", httpapi.BulkRequest{ID: "big1", DeliverAt: []byte(`"0001-01-01T00:00:00Z"`)})
	if m, _ := c.Get(ctx, "big1"); err != nil || res.Changed != 1 || m.Due != 0 {
		t.Fatalf("deliver_at year 0001: %+v, %v, due %d; want changed, due 0 (at once)", res, err, m.Due)
	}
}

// TestForecastOverflowRefused is issue 23's second reproduction: step 2^63-1 with 400
// buckets overflowed (all counts 0). Now it is a 400; so is a forecast reaching further
// than BRIDGE_MAX_DELAY (24h here), while the console's two forecasts still work.
func TestForecastOverflowRefused(t *testing.T) {
	c, _ := newAPI(t, "")
	for _, q := range []string{"step=9223372036854775807&buckets=400", "step=9223372036854775807&buckets=1",
		"step=23058430092136940&buckets=400", "step=3600000&buckets=25"} {
		if status, body := getRaw(t, c.HTTP, c.Base+"/v1/forecast?"+q); status != http.StatusBadRequest {
			t.Errorf("forecast %s: %d %s, want 400", q, status, body)
		}
	}
	for _, q := range []string{"step=60000&buckets=60", "step=3600000&buckets=24"} {
		if status, body := getRaw(t, c.HTTP, c.Base+"/v1/forecast?"+q); status != http.StatusOK {
			t.Errorf("forecast %s: %d %s, want 200", q, status, body)
		}
	}
}

func getRaw(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func body(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzAPITimes: every time the message API computes from a request (POST /v1/messages
// delay, deliver_at, expires, every; a bulk reschedule's deliver_at and shift; a
// forecast's end) is refused with a 400, or lands at or after now and at most
// BRIDGE_MAX_DELAY after it (a due in the past is due at once: its delivery time is now).
// It runs the handler against a real Redis, on the seeds in a normal test.
func FuzzAPITimes(f *testing.F) {
	for _, s := range []struct{ field, value string }{
		{"deliver_at", "9223372036854775807"}, {"deliver_at", `"9999-12-31T23:59:59.999999999Z"`},
		{"deliver_at", `"0001-01-01T00:00:00Z"`}, {"deliver_at", "-1"}, {"deliver_at", "0"},
		{"shift", `"+2562047h47m16.854775807s"`}, {"shift", `"-2562047h47m16.854775808s"`}, {"shift", `"+24h"`},
		{"shift", `"+24h0m0.001s"`}, {"shift", `"-1ms"`},
		{"delay", "9223372036854775807"}, {"delay", `"P106751DT23H47M16.854775807S"`}, {"delay", `"86400000"`},
		{"post_deliver_at", "9223372036854775807"}, {"post_deliver_at", `"0001-01-01T00:00:00Z"`},
		{"expires", `"2562047h47m16.854775807s"`}, {"every", `"2562047h47m16s"`}, {"every", `"@yearly"`},
		{"step", "9223372036854775807"}, {"step", "216000"}, {"step", "216001"}, {"step", "1000"},
	} {
		f.Add(s.field, s.value)
	}
	st := storetest.New(f, time.Second)
	const maxDelay = 24 * time.Hour
	h := New(Config{Rules: intake.Rules{MaxDelay: maxDelay, MaxPayload: 64, Targets: intake.TargetPolicy{
		Brokers: map[string]bool{"nats": true}, Allow: []string{"*"}}}, DefaultBroker: "nats"}, st, adminOf(f, st), nil)
	f.Fuzz(func(t *testing.T, field, value string) {
		before := time.Now().UnixMilli()
		due, ok := fuzzCall(t, h, field, value)
		after := time.Now().UnixMilli()
		if ok && (max(due, before) < before || due > after+maxDelay.Milliseconds() || due < 0) {
			t.Fatalf("%s %s: due %d, want at once or up to now + %s (now %d)", field, value, due, maxDelay, before)
		}
	})
}

// fuzzCall makes one request with value in field and returns the due time it computed
// (for a forecast: its end), and false when it was refused with a 400 (or the field was
// not one this fuzz knows). Any other answer fails t.
func fuzzCall(t *testing.T, h http.Handler, field, value string) (int64, bool) {
	t.Helper()
	post := func(path, body string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := record(t, h, req)
		return rec.Code, rec.Body.String()
	}
	get := func(id string) int64 {
		rec := record(t, h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/messages/"+url.PathEscape(id), nil))
		var m httpapi.MessageResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &m); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("get %s: %d %s", id, rec.Code, rec.Body)
		}
		return m.Due
	}
	var code int
	var out string
	switch field {
	case "deliver_at", "shift":
		if code, out = post("/v1/messages", `{"target":"t","id":"fz","delay":"1h"}`); code != http.StatusCreated {
			t.Fatalf("park: %d %s", code, out)
		}
		code, out = post("/v1/bulk/reschedule", `{"id":"fz","`+field+`":`+value+`}`)
		if code == http.StatusOK {
			return get("fz"), true
		}
	case "delay", "post_deliver_at", "expires", "every":
		name := strings.TrimPrefix(field, "post_")
		code, out = post("/v1/messages", `{"target":"t","id":"fz2","`+name+`":`+value+`}`)
		if code == http.StatusCreated {
			var r httpapi.PostResponse
			_ = json.Unmarshal([]byte(out), &r)
			if field == "every" {
				return 0, false // schedules are bounded by their grammar (internal/schedule), not by BRIDGE_MAX_DELAY
			}
			return r.Due, true
		}
	case "step":
		rec := record(t, h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/forecast?buckets=400&step="+url.QueryEscape(value), nil))
		code, out = rec.Code, rec.Body.String()
		if code == http.StatusOK {
			var r httpapi.ForecastResponse
			_ = json.Unmarshal([]byte(out), &r)
			if end := new(bigEnd).of(r.From, r.Step, 400); end >= 0 {
				return end, true
			}
			t.Fatalf("forecast %s: answered, but its end overflows: %s", value, out)
		}
	default:
		return 0, false
	}
	if code != http.StatusBadRequest {
		t.Fatalf("%s %s: %d %s, want 2xx or 400", field, value, code, out)
	}
	if strings.Contains(out, "-9223372036854775808") {
		t.Fatalf("%s %s: a wrapped time in %s", field, value, out)
	}
	return 0, false
}

// bigEnd computes from + step*n, -1 when it overflows int64.
type bigEnd struct{}

func (bigEnd) of(from, step int64, n int64) int64 {
	if step > (math.MaxInt64-from)/n {
		return -1
	}
	return from + step*n
}

// TestEveryBeyondMaxDelayRefused (issue 37 item 7): POST /v1/messages with an every
// longer than BRIDGE_MAX_DELAY (24h here), or a cron expression whose next occurrence
// lies beyond it, is 400 invalid_every and parks nothing (it answered 201 with a first
// firing in 2319); one within it is parked with its first firing within it.
func TestEveryBeyondMaxDelayRefused(t *testing.T) {
	c, st := newAPI(t, "")
	ctx := context.Background()
	inThreeDays := time.Now().UTC().Add(72 * time.Hour)
	for _, every := range []string{"2562047h47m16s", "24h0m1s", fmt.Sprintf("0 0 %d %d *", inThreeDays.Day(), inThreeDays.Month())} {
		_, err := c.Send(ctx, httpapi.PostRequest{Target: "x.a", Every: every, Payload: str("p")})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.HasPrefix(apiErr.Message, "invalid_every: ") ||
			!strings.Contains(apiErr.Message, "BRIDGE_MAX_DELAY") {
			t.Errorf("every %q: %v, want 400 invalid_every naming BRIDGE_MAX_DELAY", every, err)
		}
	}
	if s, err := st.Stats(ctx); err != nil || s.Parked != 0 {
		t.Fatalf("refused messages parked: %+v %v", s, err)
	}
	before := time.Now()
	res, err := c.Send(ctx, httpapi.PostRequest{Target: "x.a", Every: "24h", Payload: str("p")})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.UnixMilli(res.Due).Sub(before); d > 24*time.Hour+time.Minute {
		t.Fatalf("every 24h: first firing %s from now", d)
	}
}
