package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestConsoleFindMessage: the Messages page says how many messages the selector matches and
// which ones this page shows, pages forward and back, marks a recurring message with its
// schedule, and finds a message by id (a keyed one with its key), opening it. A forged id
// (markup, too long) is shown as text and never asked for or rendered.
// UI_SCREENSHOTS=<dir> saves console-messages-find.png (docs/img) there.
func TestConsoleFindMessage(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, s.env)
	c := &client.Client{Base: "http://" + b.APIAddr}
	send := func(r httpapi.PostRequest) {
		t.Helper()
		r.Payload = new(string)
		*r.Payload = `{"n":1}`
		if _, err := c.Send(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 5; i++ {
		send(httpapi.PostRequest{ID: fmt.Sprintf("inv-%d", i), Target: "billing.invoice", Delay: []byte(fmt.Sprintf(`"%dm"`, 10*i))})
	}
	send(httpapi.PostRequest{ID: "nightly-report", Target: "billing.report", Every: "0 2 * * *"})
	send(httpapi.PostRequest{ID: "o9-paid", Target: "orders.events", OrderingKey: "order-9", Delay: []byte(`"2h"`)})

	br := openBrowser(t)
	do, text := br.do, br.text
	ui := "http://" + b.APIAddr + "/ui/"
	do("the first page", chromedp.Navigate(ui+"#/messages?limit=4"), chromedp.WaitVisible(`//table[@id="messages"]//a[text()="inv-1"]`))
	if got := text("#msg-total"); got != "messages 1–4 of 7 matching." {
		t.Fatalf("first page's total line %q", got)
	}
	do("the second page", chromedp.Click("#next-page"), chromedp.WaitVisible(`//table[@id="messages"]//a[text()="nightly-report"]`),
		chromedp.SetValue("#find-id", "inv-9"), chromedp.Click("#find-go"),
		chromedp.WaitVisible(`//span[@id="find-result"][contains(text(),'"inv-9": no pending message')]`), screenshot("console-messages-find"))
	if got := text("#msg-total"); got != "messages 5–7 of 7 matching." {
		t.Fatalf("second page's total line %q", got)
	}
	if rows := text("#messages tbody"); !strings.Contains(rows, "nightly-report↻ 0 2 * * *") || strings.Count(rows, "↻") != 1 {
		t.Fatalf("the recurring mark:\n%s", rows)
	}
	do("back to the first", chromedp.Click("#prev-page"), chromedp.WaitVisible(`//table[@id="messages"]//a[text()="inv-1"]`))
	if got := text("#msg-total"); got != "messages 1–4 of 7 matching." {
		t.Fatalf("first page again: %q", got)
	}
	do("one target", chromedp.Navigate(ui+"#/messages?target=billing.*"), chromedp.WaitVisible(`//a[text()="nightly-report"]`))
	if got := text("#msg-total"); got != "messages 1–6 of 6 matching." {
		t.Fatalf("billing.*: %q", got)
	}
	do("find by id: forged markup",
		chromedp.SendKeys("#find-id", `<img src=x onerror="document.title='pwned'">`), chromedp.Click("#find-go"),
		chromedp.WaitVisible(`//span[@id="find-result"][contains(text(),"no pending message")]`))
	if v, err := chromedp.Run(br.ctx, chromedp.Evaluate[int](`document.querySelectorAll('img').length + (document.title === 'pwned' ? 100 : 0)`)); err != nil || v != 0 {
		t.Fatalf("forged id rendered as markup: %d %v", v, err)
	}
	do("find by id: too long",
		chromedp.SetValue("#find-id", strings.Repeat("x", 300)), chromedp.Click("#find-go"),
		chromedp.WaitVisible(`//span[@id="find-result"][contains(text(),"at most 256 bytes")]`))
	do("find by id: a keyed message without its key",
		chromedp.SetValue("#find-id", "o9-paid"), chromedp.Click("#find-go"),
		chromedp.WaitVisible(`//span[@id="find-result"][contains(text(),"no pending message")][contains(text(),"ordering_key")]`))
	do("find by id: with its key",
		chromedp.SetValue("#find-key", "order-9"), chromedp.Click("#find-go"),
		chromedp.WaitVisible(`//code[@id="msg-id"][text()="o9-paid"]`))
	do("find by id: plain",
		chromedp.Navigate(ui+"#/messages"), chromedp.WaitVisible("#find-id"),
		chromedp.SendKeys("#find-id", "inv-3"), chromedp.Click("#find-go"),
		chromedp.WaitVisible(`//code[@id="msg-id"][text()="inv-3"]`))
}
