package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestOperatorTimesBounded (issue 23 item 1), against the built bridge: a reschedule to
// 2^63-1 (was: changed 1, published at once with x-delay-due -2^63) and a forecast with
// step 2^63-1 (was: all counts 0) are 400s, by raw JSON and by `bridge bulk`; the message
// keeps its due time and does not arrive.
func TestOperatorTimesBounded(t *testing.T) {
	s := newStack(t)
	o := newOpsBridge(t, s)
	target := s.name("bounds")
	arrivals := subscribe(t, s.nc, target)
	due := o.park("big1", target, time.Hour)

	for _, body := range []string{`{"id":"big1","deliver_at":9223372036854775807}`, `{"target":"` + target + `","shift":"+2562047h"}`} {
		code, out := o.call("POST", "/v1/bulk/reschedule", json.RawMessage(body))
		if code != http.StatusBadRequest || !strings.Contains(string(out), "delay_too_long") {
			t.Errorf("reschedule %s: %d %s, want 400 delay_too_long", body, code, out)
		}
	}
	out, err := runCLI(t, "bulk", "reschedule", "--api", o.base, "--token", o.token, "--target", target, "--deliver-at", "9223372036854775807")
	if err == nil || !strings.Contains(out, "400") {
		t.Errorf("bridge bulk reschedule --deliver-at 2^63-1: %v %s, want a failure naming the 400", err, out)
	}
	if code, out := o.call("GET", "/v1/forecast?step=9223372036854775807&buckets=400", nil); code != http.StatusBadRequest {
		t.Errorf("forecast step 2^63-1: %d %s, want 400", code, out)
	}
	var got struct {
		Due int64 `json:"due"`
	}
	o.ok("GET", "/v1/messages/"+url.PathEscape("big1"), nil, http.StatusOK, &got)
	if got.Due != due {
		t.Fatalf("big1: due %d after the refused reschedules, want %d", got.Due, due)
	}
	select {
	case a := <-arrivals:
		t.Fatalf("big1 arrived (x-delay-due %s)", a.msg.Header.Get("x-delay-due"))
	case <-time.After(time.Second):
	}
}
