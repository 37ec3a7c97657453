package e2e

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestConsoleAuditPage: in Chromium, an operator names themself on the audit page, makes
// a bulk change in the console, and sees it in the audit log under that name, next to a
// shift whose client went away mid-way (interrupted), which the page's Resume button
// finishes: every message of it shifted exactly once. The filter by state and by actor
// and operation shows only those entries. With UI_SCREENSHOTS=<dir> it saves
// console-audit.png and console-audit-filter.png there.
func TestConsoleAuditPage(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, maps.Clone(s.env))
	c := &client.Client{Base: "http://" + b.APIAddr}
	dues := parkMany(t, c, "big", "fleet.jobs", 6000)
	parkMany(t, c, "ord", "orders.timeout", 3)

	// A shift whose client gives up after 30 ms: the operation is cut off mid-way.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	cut := &client.Client{Base: c.Base, Actor: "batch-job"}
	_, err := cut.Bulk(ctx, "reschedule", httpapi.BulkRequest{Target: "fleet.*", Shift: "+30m"})
	cancel()
	if err == nil {
		t.Fatal("the shift finished within 30 ms: cannot cut it off")
	}
	var cutOp string
	deadline := time.Now().Add(10 * time.Second)
	for cutOp == "" {
		page, err := c.Audit(context.Background(), 10, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			if e.Actor == "batch-job" && e.State == "interrupted" {
				cutOp = e.OpID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no interrupted entry: %+v", page.Entries)
		}
		time.Sleep(50 * time.Millisecond)
	}

	br := openBrowser(t)
	ui := "http://" + b.APIAddr + "/ui/"
	br.do("naming myself on the audit page",
		chromedp.Navigate(ui+"#/audit"),
		chromedp.WaitVisible(`//tr[@data-op="`+cutOp+`"]//button[text()="Resume"]`),
		chromedp.SendKeys("#actor", "carol"),
		chromedp.Click("#actor-save"),
		chromedp.WaitVisible(`//p[@id="audit-result"][text()="your changes are recorded as carol"]`))
	br.do("a bulk reschedule in the console",
		chromedp.Navigate(ui+"#/bulk"),
		chromedp.WaitVisible("#bulk-form"),
		chromedp.SendKeys("#b-target", "orders.*"),
		chromedp.SendKeys("#b-shift", "+1h"),
		chromedp.Click("#bulk-dry"),
		chromedp.WaitVisible("#bulk-confirm"),
		chromedp.Click("#bulk-confirm"),
		chromedp.WaitVisible(`//p[@id="bulk-result"][starts-with(text(), "done")]`))
	br.do("the audit log", chromedp.Navigate(ui+"#/audit"), chromedp.WaitVisible(`//table[@id="audit"]//td[text()="carol"]`),
		chromedp.Sleep(200*time.Millisecond), screenshot("console-audit"))
	rows := br.text("#audit tbody")
	lines := strings.Split(rows, "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "reschedule") || !strings.Contains(lines[0], "carol") || !strings.Contains(lines[0], "done") ||
		!strings.Contains(lines[1], "dry run") || !strings.Contains(lines[1], "carol") || !strings.Contains(rows, "batch-job") ||
		!strings.Contains(rows, "interrupted") {
		t.Fatalf("audit table:\n%s", rows)
	}
	br.do("the filter: interrupted changes",
		chromedp.SetValue("#af-state", "interrupted"),
		chromedp.Click("#af-apply"),
		chromedp.WaitVisible("#af-clear"), chromedp.Sleep(200*time.Millisecond), screenshot("console-audit-filter"))
	if got := strings.Split(br.text("#audit tbody"), "\n"); len(got) != 1 || !strings.Contains(got[0], "batch-job") || !strings.Contains(got[0], cutOp) {
		t.Fatalf("filtered by state interrupted:\n%s", strings.Join(got, "\n"))
	}
	br.do("the filter: carol's changes",
		chromedp.Navigate(ui+"#/audit?actor=carol&op=reschedule"),
		chromedp.WaitVisible(`//input[@id="af-actor"][@value="carol"]`))
	if got := strings.Split(br.text("#audit tbody"), "\n"); len(got) != 2 || strings.Contains(strings.Join(got, ""), "batch-job") {
		t.Fatalf("filtered by actor carol, op reschedule:\n%s", strings.Join(got, "\n"))
	}
	br.do("back to the whole log", chromedp.Click("#af-clear"), chromedp.WaitVisible(`//tr[@data-op="`+cutOp+`"]//button[text()="Resume"]`))
	br.do("resuming the cut-off shift",
		chromedp.Click(`//tr[@data-op="`+cutOp+`"]//button[text()="Resume"]`),
		chromedp.WaitVisible(`//p[@id="audit-result"][starts-with(text(), "resumed")]`),
		chromedp.WaitVisible(`//tr[@data-op="`+cutOp+`"]/td[text()="done"]`))
	after := listDues(t, c, "fleet.*")
	for id, due := range dues {
		if after[id] != due+30*60_000 {
			t.Fatalf("%s moved by %d ms, want exactly 30m", id, after[id]-due)
		}
	}
	if e := findAudit(t, c, cutOp); e.State != "done" || e.Changed != 6000 {
		t.Fatalf("the resumed entry: %+v", e)
	}
}
