package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestConsoleDeadLetters clicks through the console's dead-letters page of the built
// bridge in Chromium: the list, the filter by reason (its count at the top), a redrive of that reason shown as a
// dry run first (nothing sent), then confirmed (each letter delivered once, checked on
// NATS and through the API), and a dry run of one selected letter. UI_SCREENSHOTS=<dir>
// saves console-dead-letters.png (the README's) there.
func TestConsoleDeadLetters(t *testing.T) {
	s := newStack(t)
	target := s.name("billing.due")
	natsDeadLetters(t, s, target, 6, 3, false)
	b := startBridge(t, s.env)
	c := &client.Client{Base: "http://" + b.APIAddr}
	arrivals := subscribe(t, s.nc, target)
	br := openBrowser(t)
	do, text := br.do, br.text
	rows := func() int {
		t.Helper()
		n, err := chromedp.Run(br.ctx, chromedp.Evaluate[int](`document.querySelectorAll('#dead-letters tbody tr .dl-pick').length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ui := "http://" + b.APIAddr + "/ui/"
	do("the dead-letters page from the nav",
		chromedp.Navigate(ui),
		chromedp.WaitVisible("#nav-dead-letters"),
		chromedp.Click("#nav-dead-letters"),
		chromedp.WaitVisible(`//table[@id="dead-letters"]//a[text()="9"]`))
	if n := rows(); n != 9 {
		t.Fatalf("%d dead letters shown, want 9", n)
	}
	if got := strings.Join(strings.Fields(text("#dl-reasons")), " "); got != "all 9 target_not_allowed 6 invalid_delay 3" {
		t.Fatalf("counts by reason: %q", got)
	}
	do("the filter by reason: its count",
		chromedp.Click(`a.dl-chip[data-reason="target_not_allowed"]`),
		chromedp.WaitVisible("#dl-redrive-reason"))
	if n := rows(); n != 6 {
		t.Fatalf("%d target_not_allowed letters shown, want 6", n)
	}
	do("the dry run of the reason",
		chromedp.Click("#dl-redrive-reason"),
		chromedp.WaitVisible("#dl-confirm"), chromedp.Sleep(200*time.Millisecond), screenshot("console-dead-letters-redrive"))
	if got := text("#dl-result p"); got != "dry run (reason target_not_allowed): 6 dead letters would be redriven" {
		t.Fatalf("dry run shows %q", got)
	}
	if got := text("#dl-confirm"); got != "Confirm: redrive 6 dead letters" {
		t.Fatalf("confirm button %q", got)
	}
	select {
	case a := <-arrivals:
		t.Fatalf("the dry run delivered %q", a.msg.Data)
	case <-time.After(300 * time.Millisecond):
	}
	do("the confirmation",
		chromedp.Click("#dl-confirm"),
		chromedp.WaitVisible("#dl-done"))
	if got := text("#dl-done"); got != "redriven: 6 of 6 sent back" {
		t.Fatalf("after confirming: %q", got)
	}
	got := map[string]int{}
	for range 6 {
		got[string(receive(t, arrivals, 15*time.Second).msg.Data)]++
	}
	for i := range 6 {
		if n := got[fmt.Sprint("ok-", i)]; n != 1 {
			t.Errorf("ok-%d delivered %d times", i, n)
		}
	}
	if left := listAll(t, c, "", 100); len(left) != 3 || left[0].Reason != "invalid_delay" {
		t.Fatalf("left after the console's redrive: %+v", left)
	}
	do("one selected letter's dry run",
		chromedp.Navigate(ui+"#/dead-letters"),
		chromedp.WaitVisible(`//input[@class="dl-pick"]`),
		chromedp.Click(`(//input[@class="dl-pick"])[1]`),
		chromedp.Click("#dl-redrive-selected"),
		chromedp.WaitVisible("#dl-confirm"))
	if got := text("#dl-result p"); !strings.HasPrefix(got, "dry run (1 selected): 1 dead letters would be redriven") {
		t.Fatalf("selected dry run shows %q", got)
	}
}

// TestConsoleDeadLetterOpen: the dead-letters page shows the counts by reason at the top
// and each error on one line; a letter opens with its headers and payload as text (a
// payload of markup stays text, a binary one shows as base64); deleting a letter and a
// reason is a dry run first, then a confirm; the letters are gone from the API.
// UI_SCREENSHOTS=<dir> saves console-dead-letters.png, console-dead-letter.png and
// console-dead-letters-purge.png there.
func TestConsoleDeadLetterOpen(t *testing.T) {
	s := newStack(t)
	target := s.name("billing.due")
	natsDeadLetters(t, s, target, 4, 3, false)
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	const markup = `<img src=x onerror="document.title='pwned'"><b>bold</b>`
	for _, data := range [][]byte{[]byte(markup), {0xff, 0xfe, 0x00, 0x01}} {
		m := nats.NewMsg(s.name("delay.dlq"))
		m.Header.Set("x-target", target)
		m.Header.Set("x-delay-error", "publish_failed: target "+target+" refused the message after 10 attempts: nats: no responders available for request; the last attempt at 2026-12-02T11:00:00Z")
		m.Header.Set("x-delay-id", "order-<script>1</script>")
		m.Data = data
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	b := startBridge(t, s.env)
	c := &client.Client{Base: "http://" + b.APIAddr}
	br := openBrowser(t)
	do, text := br.do, br.text
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ui := "http://" + b.APIAddr + "/ui/"
	do("the dead-letters page",
		chromedp.Navigate(ui+"#/dead-letters"),
		chromedp.WaitVisible(`//table[@id="dead-letters"]//a[text()="9"]`), screenshot("console-dead-letters"))
	if got := strings.Join(strings.Fields(text("#dl-reasons")), " "); got != "all 9 target_not_allowed 4 invalid_delay 3 publish_failed 2" {
		t.Fatalf("counts by reason: %q", got)
	}
	// An error longer than its column stays on one line: every row is one line high.
	if got := eval(`(() => { const rs = [...document.querySelectorAll('#dead-letters tbody tr')];
		const h = rs.map(r => r.getBoundingClientRect().height); return Math.max(...h) + ' ' + Math.min(...h); })()`); strings.Fields(got)[0] != strings.Fields(got)[1] {
		t.Fatalf("row heights (max min): %s, want one line each", got)
	}
	do("the markup letter opened",
		chromedp.Click(`//table[@id="dead-letters"]//a[text()="8"]`),
		chromedp.WaitVisible("#dl-payload"), screenshot("console-dead-letter"))
	if got := text("#dl-payload"); got != markup {
		t.Fatalf("payload shown %q, want the markup as text", got)
	}
	if n := eval(`String(document.querySelectorAll('#dl-payload *, #dl-headers td *').length) + document.title`); n != "0delaybridge console" {
		t.Fatalf("elements made from the letter, and the title: %q", n)
	}
	if got := text("#dl-headers"); !strings.Contains(got, "x-delay-id\torder-<script>1</script>") || !strings.Contains(got, "x-target\t"+target) {
		t.Fatalf("headers shown: %q", got)
	}
	if got := text("#dl-payload-enc"); got != fmt.Sprintf("%d bytes, text", len(markup)) {
		t.Fatalf("payload encoding: %q", got)
	}
	do("the binary letter", chromedp.Navigate(ui+"#/dead-letter?id=9"), chromedp.WaitVisible(`//span[@id="dl-payload-enc"][contains(., "base64")]`))
	if got := text("#dl-payload"); got != "//4AAQ==" {
		t.Fatalf("binary payload shown %q, want base64", got)
	}
	do("delete one letter: the dry run",
		chromedp.Click("#dl-purge-one"),
		chromedp.WaitVisible("#dl-confirm"))
	if _, err := c.DeadLetter(t.Context(), "9", ""); err != nil {
		t.Fatalf("letter 9 after the dry run: %v", err)
	}
	do("delete one letter: confirmed", chromedp.Click("#dl-confirm"), chromedp.WaitVisible("#dl-done"))
	if got := text("#dl-done"); got != "deleted" {
		t.Fatalf("after confirming: %q", got)
	}
	if _, err := c.DeadLetter(t.Context(), "9", ""); err == nil {
		t.Fatal("letter 9 is still there")
	}
	do("delete a reason: the dry run",
		chromedp.Navigate(ui+"#/dead-letters"),
		chromedp.WaitVisible(`a.dl-chip[data-reason="invalid_delay"]`),
		chromedp.Click(`a.dl-chip[data-reason="invalid_delay"]`),
		chromedp.WaitVisible("#dl-purge-reason"),
		chromedp.Click("#dl-purge-reason"),
		chromedp.WaitVisible("#dl-confirm"), screenshot("console-dead-letters-purge"))
	if got := text("#dl-result p"); got != "dry run (reason invalid_delay): 3 dead letters would be deleted" {
		t.Fatalf("dry run shows %q", got)
	}
	do("delete a reason: confirmed", chromedp.Click("#dl-confirm"), chromedp.WaitVisible("#dl-done"))
	if got := text("#dl-done"); got != "deleted: 3 of 3" {
		t.Fatalf("after confirming: %q", got)
	}
	if left := listAll(t, c, "", 100); len(left) != 5 || slices.ContainsFunc(left, func(d httpapi.DeadLetter) bool { return d.Reason == "invalid_delay" }) {
		t.Fatalf("left after the console's purge: %+v", left)
	}
}
