package api

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/events"
)

// newEventsAPI serves the message API with a live-event hub.
func newEventsAPI(t *testing.T, token string) (*client.Client, *events.Hub) {
	t.Helper()
	st := storetest.New(t, time.Second)
	hub := events.NewHub(nil)
	h := New(Config{
		Rules: intake.Rules{MaxDelay: 24 * time.Hour, MaxPayload: 64, Targets: intake.TargetPolicy{
			Brokers: map[string]bool{"nats": true}, Allow: []string{"*"},
		}},
		DefaultBroker: "nats", Token: token, Events: hub,
	}, st, adminOf(t, st), nil)
	srv := serveAPI(t, h)
	t.Cleanup(hub.Close) // before the server closes: the streams end first
	return &client.Client{Base: srv.URL, Token: token, HTTP: srv.Client}, hub
}

// tail streams c's events (glob target) into a channel until the test ends; the
// returned channel gets the stream's end.
func tail(t *testing.T, c *client.Client, target string) (<-chan events.Event, <-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out, end := make(chan events.Event, 100), make(chan error, 1)
	go func() {
		end <- c.Events(ctx, target, func(e events.Event) error { out <- e; return nil })
	}()
	t.Cleanup(cancel)
	return out, end, cancel
}

func waitTails(t *testing.T, hub *events.Hub, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for hub.Tails() != n {
		if time.Now().After(deadline) {
			t.Fatalf("tails %d, want %d", hub.Tails(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEventsStream: a stream filtered by a glob gets the events of matching targets, the
// API's own changes (a park, a cancel: named by the message's target) among them, in
// order, and nothing else.
func TestEventsStream(t *testing.T) {
	c, hub := newEventsAPI(t, "s3cret")
	evs, _, _ := tail(t, c, "orders.*")
	waitTails(t, hub, 1)
	hub.Emit(events.Event{Type: events.Delivered, ID: "other", Target: "nats:other.a"})
	hub.Emit(events.Event{Type: events.Delivered, ID: "d1", Target: "nats:orders.a", Attempts: 1})
	hub.Emit(events.Event{Type: events.DeadLettered, ID: "d2", Target: "nats:orders.b", Reason: "publish_failed"})
	ctx := t.Context()
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "orders.c", Delay: []byte(`"1h"`), ID: "p1", Payload: str("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, httpapi.PostRequest{Target: "other.c", Delay: []byte(`"1h"`), ID: "p2", Payload: str("x")}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Cancel(ctx, "p1"); !ok || err != nil {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	hub.Emit(events.Event{Type: events.Expired, ID: "last", Target: "nats:orders.z"})
	var got []string
	for len(got) == 0 || got[len(got)-1] != "expired last" {
		select {
		case e := <-evs:
			got = append(got, e.Type+" "+e.Op+e.ID)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %v, then nothing", got)
		}
	}
	want := []string{"delivered d1", "dead_lettered d2", "changed parkp1", "changed cancelp1", "expired last"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestEventsRefusals: a cross-site browser stream is refused before it holds a tail,
// token or not; a huge or malformed glob is a 400; a stream past events.MaxTails is a
// 429; other methods 405. A client that goes frees its tail.
func TestEventsRefusals(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		t.Run("token="+token, func(t *testing.T) {
			c, hub := newEventsAPI(t, token)
			auth := map[string]string{}
			if token != "" {
				auth["Authorization"] = "Bearer " + token
			}
			with := func(extra map[string]string) map[string]string {
				h := map[string]string{}
				for k, v := range auth {
					h[k] = v
				}
				for k, v := range extra {
					h[k] = v
				}
				return h
			}
			for _, hdr := range []map[string]string{
				{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
				{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"},
				{"Origin": "http://evil.example"},
			} {
				if code, body := rawCall(t, c, "GET", "/v1/events", with(hdr), ""); code != http.StatusForbidden || !strings.Contains(body, "cross_origin") {
					t.Fatalf("cross-origin stream %v: %d %s", hdr, code, body)
				}
			}
			if hub.Tails() != 0 {
				t.Fatalf("a refused stream holds a tail (%d)", hub.Tails())
			}
			for _, glob := range []string{strings.Repeat("a", 10_000), strings.Repeat("*a", 40), "["} {
				code, body := rawCall(t, c, "GET", "/v1/events?target="+url.QueryEscape(glob), auth, "")
				if code != http.StatusBadRequest || !strings.Contains(body, "invalid_request") {
					t.Fatalf("glob of %d bytes: %d %s", len(glob), code, body)
				}
			}
			if code, _ := rawCall(t, c, "HEAD", "/v1/events", auth, ""); code != http.StatusOK || hub.Tails() != 0 {
				t.Fatalf("HEAD: %d, tails %d", code, hub.Tails())
			}
			if code, _ := rawCall(t, c, "POST", "/v1/events", with(map[string]string{"Content-Type": "application/json"}), "{}"); code != http.StatusMethodNotAllowed {
				t.Fatalf("POST: %d", code)
			}
			// Same origin (the console): served.
			own := with(map[string]string{"Sec-Fetch-Site": "same-origin"})
			if code := openStream(t, c, own); code != http.StatusOK {
				t.Fatalf("same-origin stream: %d", code)
			}
			var cancels []context.CancelFunc
			for range events.MaxTails {
				_, _, cancel := tail(t, c, "")
				cancels = append(cancels, cancel)
			}
			waitTails(t, hub, events.MaxTails)
			err := c.Events(t.Context(), "", func(events.Event) error { return nil })
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests || !strings.HasPrefix(apiErr.Message, "too_many_tails") {
				t.Fatalf("stream %d: %v", events.MaxTails+1, err)
			}
			cancels[0]() // the client goes: its tail is freed
			waitTails(t, hub, events.MaxTails-1)
		})
	}
}

// openStream opens a stream with hdr, reads its first line and closes it; it returns
// the status.
func openStream(t *testing.T, c *client.Client, hdr map[string]string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.Base+"/v1/events", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, ":") {
			t.Fatalf("first line %q, %v", line, err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
	}
	return resp.StatusCode
}

// TestEventsMissedAndShutdown: a stream that fell behind is told how many events it
// missed before the next it gets; closing the hub (shutdown) ends every stream.
func TestEventsMissedAndShutdown(t *testing.T) {
	hub := events.NewHub(nil)
	sub, err := hub.Tail()
	if err != nil {
		t.Fatal(err)
	}
	for range events.TailBuffer + 7 {
		hub.Emit(events.Event{Type: events.Delivered, ID: "x", Target: "nats:a"})
	}
	s := stream{sub: sub}
	b := string(s.gather(<-sub.Events()))
	if !strings.HasPrefix(b, `data: {"type":"missed","at":`) || !strings.Contains(b, `"count":7}`) {
		t.Fatalf("first lines %.120q: want the missed count first", b)
	}
	if n := strings.Count(b, "data: "); n != eventsChunk+1 {
		t.Fatalf("%d events in one write, want %d (the missed one and a chunk)", n, eventsChunk+1)
	}
	sub.Close()

	c, h := newEventsAPI(t, "")
	_, end, _ := tail(t, c, "")
	waitTails(t, h, 1)
	h.Close()
	select {
	case err := <-end:
		if err != nil {
			t.Fatalf("stream ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream outlived the hub's Close")
	}
}

// TestEventsOutliveServerTimeouts: a stream lives past the server's read and write
// timeouts (which are for requests) and still delivers events.
func TestEventsOutliveServerTimeouts(t *testing.T) {
	st := storetest.New(t, time.Second)
	hub := events.NewHub(nil)
	h := New(Config{DefaultBroker: "nats", Events: hub}, st, adminOf(t, st), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() {
		served <- httpapi.ServeListener(ctx, ln, h, httpapi.ServerConfig{ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond}, nil)
	}()
	t.Cleanup(func() { hub.Close(); cancel(); <-served })
	c := &client.Client{Base: "http://" + ln.Addr().String(), HTTP: checkedClient(t)}
	evs, end, _ := tail(t, c, "")
	waitTails(t, hub, 1)
	time.Sleep(500 * time.Millisecond) // five times the server's timeouts
	hub.Emit(events.Event{Type: events.Delivered, ID: "late", Target: "nats:a"})
	select {
	case e := <-evs:
		if e.ID != "late" {
			t.Fatalf("got %+v", e)
		}
	case err := <-end:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}
