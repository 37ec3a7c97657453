package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestConsoleLivePage: two replicas; the console's Live page, opened on replica A with a
// target glob, shows the deliveries and the expiry of messages sent through replica B's
// API (delivered by whichever replica owns their shard: fleet-wide) and B's parks, and
// nothing of another target. With UI_SCREENSHOTS=<dir> it saves console-live.png there.
func TestConsoleLivePage(t *testing.T) {
	s := newStack(t)
	live, other := s.name("live.out"), s.name("other.out")
	s.createStream(t, "LIVE", s.name("live.>"), other)
	s.createStream(t, "LIVEDLQ", s.name("delay.dlq"))
	bA := startBridge(t, maps.Clone(s.env))
	bB := startBridge(t, maps.Clone(s.env))
	cB := &client.Client{Base: "http://" + bB.APIAddr}

	br := openBrowser(t)
	br.do("the live page on replica A",
		chromedp.Navigate("http://"+bA.APIAddr+"/ui/#/live?target="+s.name("live.*")),
		chromedp.WaitVisible(`//p[@id="live-state"][starts-with(text(), "watching")]`))
	// B learns within about a second that A has a stream: park probes through B until
	// the page shows one.
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; br.text("#live-changed") == "0"; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no change made through replica B reached replica A's live page")
		}
		if _, err := cB.Send(t.Context(), httpapi.PostRequest{ID: fmt.Sprintf("probe-%d", i), Target: s.name("live.probe"),
			Delay: []byte(`"1h"`), Payload: str("p")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := range 6 {
		if _, err := cB.Send(t.Context(), httpapi.PostRequest{ID: fmt.Sprintf("order-%d", i), Target: live,
			Delay: []byte(fmt.Sprintf(`"%dms"`, 500+100*i)), Payload: str(`{"order":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Due 10 s ago with 1 s to live: expired when claimed.
	pastDue := []byte(fmt.Sprint(time.Now().Add(-10 * time.Second).UnixMilli()))
	if _, err := cB.Send(t.Context(), httpapi.PostRequest{ID: "late-1", Target: live, DeliverAt: pastDue,
		Expires: []byte(`"1s"`), Payload: str("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := cB.Send(t.Context(), httpapi.PostRequest{ID: "elsewhere", Target: other, Delay: []byte(`"500ms"`), Payload: str("x")}); err != nil {
		t.Fatal(err)
	}
	br.do("six deliveries and one expiry on the page",
		chromedp.WaitVisible(`//p[@id="live-delivered"][text()="6"]`),
		chromedp.WaitVisible(`//p[@id="live-expired"][text()="1"]`),
		chromedp.Sleep(300*time.Millisecond), screenshot("console-live"))
	rows := br.text("#live-rows")
	for i := range 6 {
		if !strings.Contains(rows, fmt.Sprintf("order-%d", i)) {
			t.Fatalf("order-%d missing:\n%s", i, rows)
		}
	}
	if strings.Contains(rows, "elsewhere") || strings.Contains(rows, other) {
		t.Fatalf("an event of another target on a filtered page:\n%s", rows)
	}
}

func str(s string) *string { return &s }
