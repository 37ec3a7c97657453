package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestConsoleDeadLetters clicks through the console's dead-letters page of the built
// bridge in Chromium: the list, the filter by reason, a redrive of that reason shown as a
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
		chromedp.WaitVisible(`//table[@id="dead-letters"]//td[text()="9"]`))
	if n := rows(); n != 9 {
		t.Fatalf("%d dead letters shown, want 9", n)
	}
	do("the filter by reason",
		chromedp.SendKeys("#dl-reason", "target_not_allowed"),
		chromedp.Click("#dl-apply"),
		chromedp.WaitVisible("#dl-redrive-reason"))
	if n := rows(); n != 6 {
		t.Fatalf("%d target_not_allowed letters shown, want 6", n)
	}
	do("the dry run of the reason",
		chromedp.Click("#dl-redrive-reason"),
		chromedp.WaitVisible("#dl-confirm"), chromedp.Sleep(200*time.Millisecond), screenshot("console-dead-letters"))
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
