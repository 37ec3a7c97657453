package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// attackPage is a page of another origin that forges changes on the message API given in
// its query (?api=http://host:port): a no-cors fetch of a bulk cancel, a no-cors POST of a
// message, and a text/plain form whose body is a bulk reschedule followed by "=" (the
// form's name=value). Each outcome is written into #out; #done appears when every
// request was answered (a no-cors fetch resolves on any answer, the form's frame
// loads with it).
const attackPage = `<!doctype html><html><head><title>attack</title></head><body>
<pre id="out"></pre><iframe name="sink" id="sink"></iframe>
<script>
const api = new URLSearchParams(location.search).get('api');
const out = document.getElementById('out');
const note = s => { out.textContent += s + '\n'; };
async function forge(name, path, body) {
  try {
    await fetch(api + path, {method: 'POST', mode: 'no-cors', body: body});
    note(name + ' answered');
  } catch (e) { note(name + ' failed: ' + e); }
}
async function run() {
  await forge('bulk cancel', '/v1/bulk/cancel', '{"target":"x*"}');
  await forge('post message', '/v1/messages', '{"target":"x.forged","delay":"1h","id":"forged","payload":"p"}');
  await forge('redrive', '/v1/dead-letters/redrive', '{"reason":"target_not_allowed"}');
  await forge('bulk resume', '/v1/bulk/resume', '{"op_id":"0123456789abcdef0123456789abcdef"}');
  await new Promise(resolve => {
    const sink = document.getElementById('sink');
    sink.onload = () => { note('form answered'); resolve(); };
    const f = document.createElement('form');
    f.method = 'POST'; f.enctype = 'text/plain'; f.target = 'sink'; f.action = api + '/v1/bulk/reschedule';
    const i = document.createElement('input');
    i.type = 'hidden'; i.name = '{"target":"x*","shift":"+8000h"}'; i.value = '';
    f.appendChild(i); document.body.appendChild(f); f.submit();
  });
  const done = document.createElement('p'); done.id = 'done'; done.textContent = 'done';
  document.body.appendChild(done);
}
run();
</script></body></html>`

// TestCrossSiteForgeryInABrowser is issue 23 item 6: a page of another origin opened in
// Chromium sends a no-cors bulk cancel, a no-cors POST /v1/messages, a no-cors dead-letter
// redrive (issue 27) and a text/plain form
// bulk reschedule to the token-less API (the default): every one is answered (403) and
// nothing changes. The page is served cross-site (http://localhost:<port>, the API being
// 127.0.0.1) and same-site on another port (http://127.0.0.1:<port>): both are other
// origins. The console's own changes still work (TestConsoleInABrowser).
func TestCrossSiteForgeryInABrowser(t *testing.T) {
	s := newStack(t)
	b := startBridge(t, s.env)
	c := &client.Client{Base: "http://" + b.APIAddr}
	dues := map[string]int64{}
	for i := range 5 {
		id := fmt.Sprintf("x-%d", i)
		res, err := c.Send(t.Context(), httpapi.PostRequest{ID: id, Target: "x.a", Delay: []byte(`"1h"`), Payload: new("p")})
		if err != nil {
			t.Fatal(err)
		}
		dues[id] = res.Due
	}
	// A dead letter that a forged redrive would send back (issue 27: the guard covers
	// POST /v1/dead-letters/redrive too).
	s.createStream(t, "DLQ", s.name("delay.dlq"))
	letter := nats.NewMsg(s.name("delay.dlq"))
	letter.Header.Set("x-target", "x.a")
	letter.Header.Set("x-delay-error", "target_not_allowed: x.a")
	letter.Data = []byte("dead")
	if err := s.nc.PublishMsg(letter); err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(attackPage))
	}))
	t.Cleanup(attacker.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(attacker.URL, "http://"))

	ctx := chromium(t)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // starts the browser: no timeout here
		t.Fatalf("start chromium: %v", err)
	}
	for _, origin := range []string{"http://localhost:" + port, "http://127.0.0.1:" + port} {
		page := origin + "/?api=" + url.QueryEscape("http://"+b.APIAddr)
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := chromedp.Do(tctx, chromedp.Navigate(page), chromedp.WaitVisible("#done"))
		cancel()
		if err != nil {
			t.Fatalf("attack page %s: %v", origin, err)
		}
		report, err := chromedp.Run(ctx, chromedp.TextContent("#out"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"bulk cancel answered", "post message answered", "redrive answered", "bulk resume answered", "form answered"} {
			if !strings.Contains(report, want) {
				t.Fatalf("attack from %s: %q missing (the browser did not send it?):\n%s", origin, want, report)
			}
		}
		for id, due := range dues {
			m, err := c.Get(t.Context(), id)
			if err != nil || m.Due != due {
				t.Fatalf("attack from %s: %s is %+v, %v; want it parked, due %d as before", origin, id, m, err, due)
			}
		}
		var apiErr *client.APIError
		if _, err := c.Get(t.Context(), "forged"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
			t.Fatalf("attack from %s: the forged message was parked (%v)", origin, err)
		}
		if st, err := c.Stats(t.Context()); err != nil || st.Parked != 5 {
			t.Fatalf("attack from %s: stats %+v %v, want 5 parked", origin, st, err)
		}
		if dl, err := c.DeadLetters(t.Context(), nil); err != nil || len(dl.DeadLetters) != 1 {
			t.Fatalf("attack from %s: dead letters %+v %v, want the one letter still there", origin, dl, err)
		}
		// Refused before any handler: not even a dry run or a resume reached the audit log.
		if a, err := c.Audit(t.Context(), 10, ""); err != nil || len(a.Entries) != 0 {
			t.Fatalf("attack from %s: audit log %+v %v, want empty", origin, a, err)
		}
		t.Logf("attack from %s: all answered, nothing changed", origin)
	}
}
