package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestConsoleFleetView: the console of replica A shows the fleet by default: 12 messages
// sent through replica B's API and a dead letter from NATS appear in A's fleet cards (2
// replicas, 12 in and out in the last hour, the dead letter's reason) and in its charts of
// the last hour and the last 7 days; the toggle shows A's own counters (nothing parked
// through A) and back. UI_SCREENSHOTS=<dir> saves console-fleet.png (docs/img, the README).
func TestConsoleFleetView(t *testing.T) {
	s := newStack(t)
	bs := startReplicas(t, s, 2)
	out := subscribe(t, s.nc, s.name("console.fleet"))
	c := &client.Client{Base: "http://" + bs[1].APIAddr}
	payload := "x"
	for i := range 12 {
		if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: fmt.Sprintf("cf-%d", i), Target: s.name("console.fleet"),
			Delay: []byte(fmt.Sprintf(`"%dms"`, 300+100*i)), Payload: &payload}); err != nil {
			t.Fatal(err)
		}
	}
	hdr := nats.Header{}
	hdr.Set("x-delay", "30s") // no x-target: dead-lettered as missing_target
	if reply := request(t, s.nc, s.name("delay.in"), hdr, "lost"); reply["error"] == nil {
		t.Fatalf("reply %v, want an error", reply)
	}
	for range 12 {
		receive(t, out, 20*time.Second)
	}

	br := openBrowser(t)
	do, text := br.do, br.text
	ui := "http://" + bs[0].APIAddr + "/ui/"
	do("the fleet overview", chromedp.Navigate(ui), chromedp.WaitVisible("#fleet-in .big"))
	// The replicas add their counts every 5 s and the overview refreshes every 5 s.
	deadline := time.Now().Add(30 * time.Second)
	for text("#fleet-in .big") != "12" || text("#fleet-out .big") != "12" || text("#fleet-dead .big") != "1" {
		if time.Now().After(deadline) {
			t.Fatalf("fleet cards after 30 s: in %q, out %q, dead %q", text("#fleet-in .big"), text("#fleet-out .big"), text("#fleet-dead .big"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if r, dead, on := text("#fleet-replicas .big"), text("#fleet-dead .sub"), text("#scope .on"); r != "2" || !strings.Contains(dead, "missing_target 1") || on != "the fleet" {
		t.Fatalf("replicas %q, dead letters %q, toggle on %q", r, dead, on)
	}
	do("the fleet's charts", chromedp.WaitVisible("#fleet-hour polyline.in"), chromedp.WaitVisible("#fleet-week polyline.out"),
		chromedp.WaitVisible("#fleet-hour rect.dead"), chromedp.Sleep(300*time.Millisecond), screenshot("console-fleet"))
	if h := text("#fleet-hour-title"); !strings.Contains(h, "in 12, out 12, dead-lettered 1") {
		t.Fatalf("last hour chart's title: %q", h)
	}

	do("this replica", chromedp.Click("#scope-replica"), chromedp.WaitVisible("#rate-in .sub"))
	if in, on := text("#rate-in .sub"), text("#scope .on"); !strings.Contains(in, "; 0 since start") || on != "this replica" {
		t.Fatalf("replica A's own In card %q (toggle on %q): want nothing parked through A", in, on)
	}
	do("back to the fleet", chromedp.Click("#scope-fleet"), chromedp.WaitVisible("#fleet-in .big"))
	if got := text("#fleet-in .big"); got != "12" {
		t.Fatalf("fleet in after the toggle: %q", got)
	}
}

// TestConsoleFleetQuota: quota refusals on two replicas, two API 429s on B and one
// dead-lettered quota_exceeded from NATS, show as the fleet's on A's overview (the card
// Quota refusals: 3, dead-lettered 1, API 429 2), while the quota table says its column
// is this replica's. UI_SCREENSHOTS=<dir> saves console-fleet-quota.png there.
func TestConsoleFleetQuota(t *testing.T) {
	s := newStack(t)
	target := s.name("quota.a")
	s.env["BRIDGE_TARGET_QUOTA"] = s.name("quota.*") + "=1"
	bs := startReplicas(t, s, 2)
	c := &client.Client{Base: "http://" + bs[1].APIAddr}
	payload := "x"
	refused := 0
	for i := range 3 {
		_, err := c.Send(t.Context(), httpapi.PostRequest{ID: fmt.Sprint("q-", i), Target: target, Delay: []byte(`"1h"`), Payload: &payload})
		if apiErr := (*client.APIError)(nil); errors.As(err, &apiErr) && apiErr.Status == 429 {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused != 2 {
		t.Fatalf("%d of 3 refused with 429, want 2 (quota 1)", refused)
	}
	hdr := nats.Header{}
	hdr.Set("x-delay", "1h")
	hdr.Set("x-target", target)
	if reply := request(t, s.nc, s.name("delay.in"), hdr, "over"); !strings.HasPrefix(fmt.Sprint(reply["error"]), "quota_exceeded") {
		t.Fatalf("reply %v, want quota_exceeded", reply)
	}
	br := openBrowser(t)
	do, text := br.do, br.text
	do("the fleet overview", chromedp.Navigate("http://"+bs[0].APIAddr+"/ui/"), chromedp.WaitVisible("#fleet-quota .big"))
	deadline := time.Now().Add(30 * time.Second)
	for text("#fleet-quota .big") != "3" {
		if time.Now().After(deadline) {
			t.Fatalf("quota card after 30 s: %q %q", text("#fleet-quota .big"), text("#fleet-quota .sub"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	do("the quota card", chromedp.WaitVisible("#quotas"), chromedp.Sleep(300*time.Millisecond), screenshot("console-fleet-quota"))
	if sub, head := text("#fleet-quota .sub"), text("#quotas thead"); sub != "dead-lettered 1, API 429 2" || !strings.Contains(head, "rejected by this replica") {
		t.Fatalf("quota card %q, quota table head %q", sub, head)
	}
}
