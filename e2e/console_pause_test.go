package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestConsolePauseTarget: the overview's Targets table pauses a target with its button:
// the row shows it paused, the paused list names it, the API and the audit log agree, and
// its due messages are not published; the list's resume button publishes them.
// UI_SCREENSHOTS=<dir> saves console-paused.png (docs/img).
func TestConsolePauseTarget(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, s.env)
	target := s.name("console.pause")
	out := subscribe(t, s.nc, target)
	c := &client.Client{Base: "http://" + b.APIAddr}
	payload := "x"
	send := func(id string, delay string) {
		t.Helper()
		if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: id, Target: target, Delay: []byte(delay), Payload: &payload}); err != nil {
			t.Fatal(err)
		}
	}
	send("cp-later", `"1h"`)
	br := openBrowser(t)
	do := br.do
	ui := "http://" + b.APIAddr + "/ui/"
	btn := fmt.Sprintf(`//table[@id="targets"]//button[@data-target="nats:%s"]`, target)
	do("the overview", chromedp.Navigate(ui), chromedp.WaitVisible(btn))
	if got := br.text(btn); got != "pause" {
		t.Fatalf("button %q, want pause", got)
	}
	do("pause", chromedp.Click(btn), chromedp.WaitVisible(`//table[@id="paused-globs"]//code[text()="nats:`+target+`"]`),
		chromedp.WaitVisible(`//p[@id="pause-result"][starts-with(text(), "paused ")]`))
	ts, err := c.Targets(t.Context(), false)
	if err != nil || len(ts.Paused) != 1 || ts.Paused[0].Target != "nats:"+target {
		t.Fatalf("targets after the console's pause: %+v %v", ts, err)
	}
	for i := range 3 {
		send(fmt.Sprintf("cp-%d", i), `"100ms"`)
	}
	time.Sleep(1500 * time.Millisecond) // due and claimed: put back, not published
	select {
	case m := <-out:
		t.Fatalf("a paused target published %v", m)
	default:
	}
	do("the paused row", chromedp.Navigate(ui+"#/messages"), chromedp.Navigate(ui), chromedp.WaitVisible(btn),
		chromedp.Sleep(300*time.Millisecond), screenshot("console-paused"))
	if got := br.text(btn); got != "resume" {
		t.Fatalf("button of the paused target %q, want resume", got)
	}
	do("resume", chromedp.Click(`//button[@class="resume-glob"]`),
		chromedp.WaitVisible(`//p[@id="pause-result"][starts-with(text(), "resumed ")]`))
	if got := br.text("#pause-result"); !strings.Contains(got, "3 waiting messages back") {
		t.Fatalf("resume said %q, want 3 messages back", got)
	}
	for range 3 {
		receive(t, out, 10*time.Second)
	}
	a, err := c.Audit(t.Context(), 10, "")
	if err != nil || len(a.Entries) < 2 || a.Entries[0].Op != "resume" || a.Entries[1].Op != "pause" {
		t.Fatalf("audit %+v %v: want resume, pause", a.Entries, err)
	}
}
