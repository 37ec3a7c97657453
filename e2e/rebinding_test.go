package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// rebindPage runs on a name rebound to the bridge: its fetches are same-origin to the
// browser (no CORS, no cross-origin guard), so it can read the API's answers. It reads
// the parked messages and sends a bulk cancel, and writes each status into #out.
const rebindPage = `<!doctype html><html><head><title>rebind</title></head><body>
<pre id="out"></pre>
<script>
const out = document.getElementById('out');
const note = s => { out.textContent += s + '\n'; };
async function run() {
  for (const [name, path, init] of [
    ['list', '/v1/messages', {}],
    ['bulk cancel', '/v1/bulk/cancel', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{"target":"x*"}'}],
    ['console', '/ui/', {}],
  ]) {
    try {
      const r = await fetch(path, init);
      const body = await r.text();
      note(name + ' ' + r.status + ' ' + body.slice(0, 120).replace(/\n/g, ' '));
    } catch (e) { note(name + ' failed: ' + e); }
  }
  const done = document.createElement('p'); done.id = 'done'; done.textContent = 'done';
  document.body.appendChild(done);
}
run();
</script></body></html>`

// TestDNSRebindingInABrowser is issue 37 item 6: a page on a DNS name rebound to the
// bridge's address (Chromium resolves evil.test and console.test to 127.0.0.1,
// --host-resolver-rules) is same-origin with the token-less API, so the cross-origin guard
// lets its requests through; the bridge refuses them by their Host (403
// host_not_allowed), reads and changes alike, and nothing changes. The rebinding itself
// (the name first serving the attacker's page, then the bridge) is played by a front
// server on the name's port that serves /rebind and passes every other request, Host,
// Origin and Sec-Fetch-Site unchanged, to the bridge: the bridge sees what it would see
// from the rebound name. The same page on console.test, listed in BRIDGE_API_HOSTS, is
// answered; the console at 127.0.0.1 works.
func TestDNSRebindingInABrowser(t *testing.T) {
	s := newStack(t)
	env := maps.Clone(s.env)
	env["BRIDGE_API_HOSTS"] = "console.test"
	b := startBridge(t, env)
	c := &client.Client{Base: "http://" + b.APIAddr}
	dues := map[string]int64{}
	for i := range 3 {
		id := fmt.Sprintf("x-%d", i)
		res, err := c.Send(t.Context(), httpapi.PostRequest{ID: id, Target: "x.a", Delay: []byte(`"1h"`), Payload: new("p")})
		if err != nil {
			t.Fatal(err)
		}
		dues[id] = res.Due
	}
	bridgeURL, err := url.Parse("http://" + b.APIAddr)
	if err != nil {
		t.Fatal(err)
	}
	toBridge := httputil.NewSingleHostReverseProxy(bridgeURL) // keeps the browser's Host
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/rebind" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(rebindPage))
			return
		}
		toBridge.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(front.URL, "http://"))

	ctx := chromium(t, chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1, MAP console.test 127.0.0.1"))
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // starts the browser: no timeout here
		t.Fatalf("start chromium: %v", err)
	}
	visit := func(origin string) string {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(tctx, chromedp.Navigate(origin+"/rebind"), chromedp.WaitVisible("#done")); err != nil {
			t.Fatalf("page %s: %v", origin, err)
		}
		report, err := chromedp.Run(tctx, chromedp.TextContent("#out"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("page %s:\n%s", origin, report)
		return report
	}
	report := visit("http://evil.test:" + port)
	for _, want := range []string{"list 403 {\"error\":\"host_not_allowed: ", "bulk cancel 403 {\"error\":\"host_not_allowed: ", "console 403 "} {
		if !strings.Contains(report, want) {
			t.Errorf("rebound page: %q missing:\n%s", want, report)
		}
	}
	for id, due := range dues {
		if m, err := c.Get(t.Context(), id); err != nil || m.Due != due {
			t.Fatalf("after the rebound page: %s is %+v, %v; want it parked, due %d", id, m, err, due)
		}
	}
	if a, err := c.Audit(t.Context(), 10, ""); err != nil || len(a.Entries) != 0 {
		t.Fatalf("after the rebound page: audit log %+v %v, want empty", a, err)
	}

	// A name listed in BRIDGE_API_HOSTS is the operator's: answered (its bulk cancel too).
	report = visit("http://console.test:" + port)
	for _, want := range []string{"list 200 ", "bulk cancel 200 {", "\"matched\":3,\"changed\":3", "console 200 "} {
		if !strings.Contains(report, want) {
			t.Errorf("listed host: %q missing:\n%s", want, report)
		}
	}

	// The console at the bridge's own address works.
	if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: "y-1", Target: "y.a", Delay: []byte(`"1h"`), Payload: new("p")}); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate("http://"+b.APIAddr+"/ui/"),
		chromedp.WaitVisible(`//table[@id="targets"]//a[text()="nats:y.a"]`)); err != nil {
		t.Fatalf("console at %s: %v", b.APIAddr, err)
	}
}
