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
