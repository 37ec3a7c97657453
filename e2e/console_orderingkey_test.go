package e2e

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestConsoleOrderingKey: the console's list shows a keyed message's ordering key and,
// for one its predecessor holds, "held by" with a link to that message; the message view
// (opened from the list, so named by id and key) shows both, follows the link, and
// cancels the held message with its key. UI_SCREENSHOTS=<dir> saves
// console-message-held.png (docs/img) there.
func TestConsoleOrderingKey(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, s.env)
	c := &client.Client{Base: "http://" + b.APIAddr}
	for _, m := range []struct{ id, delay, payload string }{
		{"o1-created", "1h", `{"order":1,"event":"created"}`},
		{"o1-paid", "30m", `{"order":1,"event":"paid"}`},
		{"o1-cancelled", "10m", `{"order":1,"event":"cancelled"}`},
	} {
		if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: m.id, Target: "orders.events", OrderingKey: "order-1",
			Delay: []byte(`"` + m.delay + `"`), Payload: &m.payload}); err != nil {
			t.Fatal(err)
		}
	}

	br := openBrowser(t)
	do, text := br.do, br.text
	ui := "http://" + b.APIAddr + "/ui/"
	do("the list", chromedp.Navigate(ui+"#/messages"), chromedp.WaitVisible(`//table[@id="messages"]//a[text()="o1-paid"]`))
	rows := text("#messages tbody")
	if !strings.Contains(rows, "o1-paid key order-1") || !strings.Contains(rows, "(held by o1-created)") ||
		!strings.Contains(rows, "(held by o1-paid)") {
		t.Fatalf("the list does not show the keys and what holds them:\n%s", rows)
	}
	do("o1-cancelled's detail",
		chromedp.Click(`//a[@class="msg-link"][text()="o1-cancelled"]`),
		chromedp.WaitVisible(`//code[@id="msg-id"][text()="o1-cancelled"]`), screenshot("console-message-held"))
	if detail := text("#detail"); !strings.Contains(detail, "ordering key\torder-1") || !strings.Contains(detail, "held by\to1-paid (published once") {
		t.Fatalf("o1-cancelled's detail:\n%s", detail)
	}
	do("the message that holds it",
		chromedp.Click("#held-by"),
		chromedp.WaitVisible(`//code[@id="msg-id"][text()="o1-paid"]`))
	if detail := text("#detail"); !strings.Contains(detail, "held by\to1-created") {
		t.Fatalf("o1-paid's detail:\n%s", detail)
	}
	do("o1-paid's cancel",
		chromedp.Click("#cancel"),
		chromedp.WaitVisible("#cancel-yes"),
		chromedp.Click("#cancel-yes"),
		chromedp.WaitVisible(`//p[@id="action-result"][text()="cancelled"]`))
	var apiErr *client.APIError
	if _, err := c.GetKey(t.Context(), "o1-paid", "order-1"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("o1-paid after the console's cancel: %v", err)
	}
	if m, err := c.GetKey(t.Context(), "o1-cancelled", "order-1"); err != nil || m.HeldBy != "o1-created" {
		t.Fatalf("o1-cancelled after o1-paid's cancel: %+v %v; want it held by o1-created", m, err)
	}
}

// TestConsoleHeldByOrder: the overview's Targets table says how many parked messages
// their ordering key holds (all targets); keys with markup, quotes and a "*" are shown as
// text in the list and the message view, never as markup. UI_SCREENSHOTS=<dir> saves
// console-targets-held.png (docs/img) there.
func TestConsoleHeldByOrder(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, s.env)
	c := &client.Client{Base: "http://" + b.APIAddr}
	const hostile = `<img src=x onerror="document.title='pwned'">"*`
	for _, m := range []struct{ id, target, key, delay string }{
		{"o1-created", "orders.events", "order-1", "1h"},
		{"o1-paid", "orders.events", "order-1", "30m"},
		{"o1-cancelled", "orders.events", "order-1", "10m"},
		{"inv-1", "billing.invoices", "order-1", "5m"}, // keys are global across targets
		{"h1", "billing.invoices", hostile, "2h"},
		{"h2", "billing.invoices", hostile, "2h"},
		{"plain", "orders.events", "", "20m"},
	} {
		if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: m.id, Target: m.target, OrderingKey: m.key,
			Delay: []byte(`"` + m.delay + `"`)}); err != nil {
			t.Fatal(err)
		}
	}
	br := openBrowser(t)
	do, text := br.do, br.text
	ui := "http://" + b.APIAddr + "/ui/"
	do("the overview", chromedp.Navigate(ui+"#/"), chromedp.WaitVisible(`//table[@id="targets"]//a[text()="nats:billing.invoices"]`),
		screenshot("console-targets-held"))
	if got := strings.TrimSpace(text("#held-by-order")); got != "(4 held by order)" {
		t.Fatalf("targets heading says %q, want (4 held by order)", got)
	}
	do("the list", chromedp.Navigate(ui+"#/messages"), chromedp.WaitVisible(`//table[@id="messages"]//a[text()="h2"]`))
	if rows := text("#messages tbody"); !strings.Contains(rows, "h2 key "+hostile) || !strings.Contains(rows, "(held by h1)") {
		t.Fatalf("the list does not show the key as text:\n%s", rows)
	}
	noMarkup(t, br, "the list")
	do("h2's detail", chromedp.Click(`//a[@class="msg-link"][text()="h2"]`), chromedp.WaitVisible(`//code[@id="msg-id"][text()="h2"]`))
	if detail := text("#detail"); !strings.Contains(detail, "ordering key\t"+hostile) || !strings.Contains(detail, "held by\th1") {
		t.Fatalf("h2's detail:\n%s", detail)
	}
	noMarkup(t, br, "the message view")
}

// noMarkup fails t when the page holds an img element or its title was changed by one.
func noMarkup(t *testing.T, br *browser, where string) {
	t.Helper()
	imgs, err := chromedp.Run(br.ctx, chromedp.Evaluate[int](`document.querySelectorAll('img').length`))
	if err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](`document.title`))
	if err != nil {
		t.Fatal(err)
	}
	if imgs != 0 || title == "pwned" {
		t.Fatalf("a key became markup in %s: %d img elements, title %q", where, imgs, title)
	}
}
