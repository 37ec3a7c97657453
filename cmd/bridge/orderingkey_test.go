package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi/api"
	"github.com/delaybridge/delaybridge/ingress/intake"
)

// TestOrderingKeyCommands: against a message API over a real store, bridge send
// --ordering-key parks keyed messages, bridge ls shows their key and what holds the
// second, bridge cancel without the key does not reach a keyed message (exit 1, naming
// --ordering-key) and with it cancels it.
func TestOrderingKeyCommands(t *testing.T) {
	st := storetest.New(t, time.Second)
	adm := admin.New(st)
	if err := adm.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{
		Rules: intake.Rules{MaxDelay: time.Hour, MaxPayload: 64, Targets: intake.TargetPolicy{
			Brokers: map[string]bool{"nats": true}, Allow: []string{"*"}, Own: map[string][]string{"nats": {"delay.in"}},
		}},
		DefaultBroker: "nats",
	}, st, adm, nil))
	t.Cleanup(srv.Close)
	for _, m := range []struct{ id, delay string }{{"o1-created", "1h"}, {"o1-paid", "1m"}} {
		code, out, errOut := runCmd(t, "send", "--api", srv.URL, "--target", "orders.events", "--id", m.id,
			"--ordering-key", "order-1", "--delay", m.delay, m.id)
		if code != 0 || !strings.Contains(out, "parked "+m.id) {
			t.Fatalf("send %s: exit %d\n%s%s", m.id, code, out, errOut)
		}
	}
	code, out, errOut := runCmd(t, "ls", "--api", srv.URL)
	if code != 0 || !strings.Contains(out, `o1-paid (key "order-1")`) || !strings.Contains(out, "(held by o1-created)") {
		t.Fatalf("ls: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd(t, "cancel", "--api", srv.URL, "o1-paid")
	if code != 1 || !strings.Contains(errOut, "give --ordering-key") {
		t.Fatalf("cancel without key: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd(t, "cancel", "--api", srv.URL, "--ordering-key", "order-1", "o1-paid")
	if code != 0 || !strings.Contains(out, "o1-paid: cancelled") {
		t.Fatalf("cancel with key: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := st.GetKey(t.Context(), "o1-created", "order-1"); err != nil {
		t.Fatalf("the other message of the key: %v", err)
	}
}
