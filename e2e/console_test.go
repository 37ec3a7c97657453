package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// chromium returns a headless browser context (Debian's chromium through chromedp); the
// test fails when the browser is not installed (make test and .ci/run install it).
func chromium(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("chromium not found on PATH: install Debian's chromium package (make test and .ci/run do)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1280, 900))
	opts = append(opts, extra...)
	actx, cancelA := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelC(); cancelA() })
	return ctx
}

// TestConsoleInABrowser clicks through the web console (GET /ui/) of the built bridge in
// a real browser: the token, the overview's targets, the list filtered by target, a
// message's detail (a hostile header and payload shown as text), its cancel, and a bulk
// reschedule with its dry run and confirmation; every change is checked through the API.
// UI_SCREENSHOTS=<dir> saves the screenshots of docs/operating.md (docs/img) there.
func TestConsoleInABrowser(t *testing.T) {
	s := newStack(t)
	const token = "console-token"
	env := maps.Clone(s.env)
	env["BRIDGE_API_TOKEN"] = token
	env["BRIDGE_TARGET_QUOTA"] = "billing.*=8,orders.*=100"
	b := startBridge(t, env)
	c := &client.Client{Base: "http://" + b.APIAddr, Token: token}
	dues := map[string]int64{}
	send := func(id, target, delay, payload string, hdr map[string]string) {
		res, err := c.Send(t.Context(), httpapi.PostRequest{ID: id, Target: target, Delay: []byte(`"` + delay + `"`), Payload: &payload, Headers: hdr})
		if err != nil {
			t.Fatal(err)
		}
		dues[id] = res.Due
	}
	for i := 1; i <= 5; i++ {
		send(fmt.Sprintf("inv-%d", i), "billing.invoice", fmt.Sprintf("%dm", 10*i), fmt.Sprintf(`{"invoice":%d,"total":"%d.00"}`, 1040+i, 100*i), map[string]string{"tenant": "acme"})
	}
	for i := 1; i <= 3; i++ {
		send(fmt.Sprintf("ord-%d", i), "orders.timeout", fmt.Sprintf("%dh", i), fmt.Sprintf(`{"order":%d}`, i), nil)
	}
	// inv-2 again, with a spread window (a replace: the counts stay).
	windowed := `{"invoice":1042,"total":"200.00"}`
	if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: "inv-2", Target: "billing.invoice", Delay: []byte(`"20m"`), Window: []byte(`"90s"`), Payload: &windowed}); err != nil {
		t.Fatal(err)
	}
	// A target of no quota pattern whose next message has a window.
	reminder := `{"remind":1}`
	if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: "rem-1", Target: "reminders.daily", Delay: []byte(`"30m"`), Window: []byte(`"10m"`), Payload: &reminder}); err != nil {
		t.Fatal(err)
	}
	const hostile = `<img src=x onerror="document.title='owned'">`
	send("xss-1", "billing.invoice", "2h", hostile, map[string]string{"note": hostile})

	br := openBrowser(t)
	ctx, do, text := br.ctx, br.do, br.text
	count := func(expr string) int {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	ui := "http://" + b.APIAddr + "/ui/"
	do("the token and the overview",
		chromedp.Navigate(ui),
		chromedp.WaitVisible("#error"),
		chromedp.SendKeys("#token", token),
		chromedp.Click("#token-save"),
		chromedp.WaitVisible(`//table[@id="targets"]//a[text()="nats:billing.invoice"]`))
	if got := text("#parked-total .big"); got != "10" {
		t.Fatalf("overview parked total %q, want 10", got)
	}
	do("the overview's charts", chromedp.WaitVisible("#forecast-hour rect"), chromedp.Sleep(300*time.Millisecond), screenshot("console-overview"))
	if rows := text("#targets tbody"); !strings.Contains(rows, "nats:billing.invoice\t6") || !strings.Contains(rows, "nats:orders.timeout\t3") {
		t.Fatalf("targets table:\n%s", rows)
	}
	// Each target's window (of its next message) and quota (pattern and its use) cells.
	for target, want := range map[string][2]string{
		"nats:billing.invoice": {"-", "billing.* 6/8 (75.0%)"}, // inv-1 first, no window
		"nats:orders.timeout":  {"-", "orders.* 3/100 (3.0%)"},
		"nats:reminders.daily": {"10m", "-"},
	} {
		cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
			const a = [...document.querySelectorAll('#targets a.target-link')].find(a => a.textContent === `+strconv.Quote(target)+`);
			return a ? [...a.closest('tr').cells].map(c => c.textContent) : [];
		})()`))
		if err != nil || len(cells) != 7 || cells[4] != want[0] || cells[5] != want[1] || cells[6] != "pause" {
			t.Errorf("%s's row: %q %v; want window %q, quota %q", target, cells, err, want[0], want[1])
		}
	}
	if rows := text("#quotas tbody"); !strings.Contains(rows, "billing.*\t6\t8\t75.0%\t0") || !strings.Contains(rows, "orders.*\t3\t100\t3.0%\t0") {
		t.Fatalf("quotas table:\n%s", rows)
	}
	do("the list of one target",
		chromedp.Click(`//a[text()="nats:billing.invoice"]`),
		chromedp.WaitVisible(`//table[@id="messages"]//a[text()="inv-1"]`), screenshot("console-messages"))
	if n := count(`document.querySelectorAll('#messages tbody tr').length`); n != 6 {
		t.Fatalf("list filtered by billing.invoice: %d rows, want 6", n)
	}
	if rows := text("#messages tbody"); !strings.Contains(rows, "(drawn in 1m30s)") {
		t.Fatalf("list does not show inv-2's window:\n%s", rows)
	}
	do("a windowed message's detail", chromedp.Navigate(ui+"#/message/inv-2"), chromedp.WaitVisible(`//code[@id="msg-id"][text()="inv-2"]`))
	if detail := text("#detail"); !strings.Contains(detail, "window\t1m30s (due is the time drawn in it)") {
		t.Fatalf("inv-2's detail does not show its window:\n%s", detail)
	}
	do("a hostile message's detail", chromedp.Navigate(ui+"#/message/xss-1"), chromedp.WaitVisible("#payload"))
	if imgs, title, payload := count(`document.querySelectorAll('img').length`), text("title"), text("#payload"); imgs != 0 || title == "owned" || payload != hostile {
		t.Fatalf("hostile payload: %d img elements, title %q, payload shown %q", imgs, title, payload)
	}
	do("inv-1's detail",
		chromedp.Navigate(ui+"#/messages?target=billing.*"),
		chromedp.WaitVisible(`//a[text()="inv-1"]`),
		chromedp.Click(`//a[text()="inv-1"]`),
		chromedp.WaitVisible(`//code[@id="msg-id"][text()="inv-1"]`), screenshot("console-message"))
	if payload := text("#payload"); payload != `{"invoice":1041,"total":"100.00"}` {
		t.Fatalf("inv-1 payload shown as %q", payload)
	}
	do("inv-1's cancel",
		chromedp.Click("#cancel"),
		chromedp.WaitVisible("#cancel-yes"),
		chromedp.Click("#cancel-yes"),
		chromedp.WaitVisible(`//p[@id="action-result"][text()="cancelled"]`))
	var apiErr *client.APIError
	if _, err := c.Get(t.Context(), "inv-1"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("inv-1 after the console's cancel: %v", err)
	}
	do("a bulk reschedule's dry run",
		chromedp.Navigate(ui+"#/bulk"),
		chromedp.WaitVisible("#bulk-form"),
		chromedp.SendKeys("#b-target", "orders.*"),
		chromedp.SendKeys("#b-shift", "+1h"),
		chromedp.Click("#bulk-dry"),
		chromedp.WaitVisible("#bulk-confirm"), screenshot("console-bulk"),
		// The cancel above returns to the list 600 ms later unless the operator went
		// elsewhere meanwhile, as here: the bulk page must stay.
		chromedp.Sleep(700*time.Millisecond), chromedp.WaitVisible("#bulk-confirm"))
	dry := text("#bulk-result")
	do("its confirmation", chromedp.Click("#bulk-confirm"), chromedp.WaitVisible(`//p[@id="bulk-result"][starts-with(text(), "done")]`))
	if result := text("#bulk-result"); dry != "dry run: 3 messages match" || result != "done: matched 3, changed 3" {
		t.Fatalf("bulk: %q then %q", dry, result)
	}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("ord-%d", i)
		m, err := c.Get(t.Context(), id)
		if err != nil || m.Due != dues[id]+3_600_000 {
			t.Fatalf("%s after the console's +1h: %+v %v (was due %d)", id, m, err, dues[id])
		}
	}
}

// TestConsoleOverviewHonest: the overview's first load counts a dead letter from ingress
// (a message without x-target sent over NATS) under dead-lettered, shows rates rather than
// "-" for In and Out, and a page opened without the token names BRIDGE_API_TOKEN.
func TestConsoleOverviewHonest(t *testing.T) {
	s := newStack(t)
	const token = "overview-token"
	env := maps.Clone(s.env)
	env["BRIDGE_API_TOKEN"] = token
	b := startBridge(t, env)
	c := &client.Client{Base: "http://" + b.APIAddr, Token: token}
	payload := "x"
	if _, err := c.Send(t.Context(), httpapi.PostRequest{Target: "honest.out", Delay: []byte(`"1h"`), Payload: &payload}); err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{}
	hdr.Set("x-delay", "30s") // no x-target: dead-lettered as missing_target
	if reply := request(t, s.nc, s.name("delay.in"), hdr, "lost"); reply["error"] == nil {
		t.Fatalf("reply %v, want an error", reply)
	}
	br := openBrowser(t)
	run, text := br.do, br.text
	// This replica's view (the fleet's is the default: TestConsoleFleetView).
	run("the page without the token", chromedp.Navigate("http://"+b.APIAddr+"/ui/#/?scope=replica"), chromedp.WaitVisible("#error"))
	if e := text("#error"); !strings.Contains(e, "BRIDGE_API_TOKEN") {
		t.Fatalf("the 401 message %q does not name BRIDGE_API_TOKEN", e)
	}
	run("the overview's first load",
		chromedp.SendKeys("#token", token), chromedp.Click("#token-save"), chromedp.WaitVisible("#rate-out .sub"))
	in, out := text("#rate-in"), text("#rate-out")
	if strings.Contains(in, "\n-\n") || strings.HasPrefix(text("#rate-in .big"), "-") || text("#rate-out .big") == "-" {
		t.Fatalf("first load shows no rate:\n%s\n%s", in, out)
	}
	if !strings.Contains(out, "1 dead-lettered") {
		t.Fatalf("the ingress dead letter is not counted:\n%s", out)
	}
}

// browser is a started headless Chromium for one test, with its step helpers.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// screenshot saves the page as <name>.png in UI_SCREENSHOTS when set.
func screenshot(name string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		dir := os.Getenv("UI_SCREENSHOTS")
		if dir == "" {
			return chromedp.Void{}, nil
		}
		png, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return chromedp.Void{}, err
		}
		return chromedp.Void{}, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	}
}

// openBrowser starts Chromium (no timeout on the start: the first start is slow).
func openBrowser(t *testing.T) *browser {
	t.Helper()
	ctx := chromium(t)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

// do runs steps within 20 s; what names them in the failure.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	tctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// text is the text of the element sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(sel))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}
