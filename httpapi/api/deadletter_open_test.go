package api

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// status is the HTTP status of a client error (0: none).
func status(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// A dead letter opens with its headers and payload: text when UTF-8, else base64; an id of
// another form is 400, one that is not a letter 404.
func TestDeadLetterOpen(t *testing.T) {
	c, _, _, nc := deadLetterServer(t, 3, 0)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bin := natsgo.NewMsg("delay.dlq")
	bin.Header.Set("x-delay-error", "corrupt: <b>bad</b>")
	bin.Data = []byte{0xff, 0x00, '<', 'b', '>'}
	if _, err := js.PublishMsg(t.Context(), bin); err != nil {
		t.Fatal(err)
	}
	d, err := c.DeadLetter(t.Context(), "2", "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Reason != "publish_failed" || d.Payload != "1" || d.PayloadEncoding != "text" || d.Broker != "nats" || d.Target != "out.1" {
		t.Fatalf("letter 2: %+v", d)
	}
	if !hasHeader(d.Headers, "x-target", "out.1") || !hasHeader(d.Headers, "x-delay-error", "publish_failed: letter 1") {
		t.Fatalf("letter 2's headers: %+v", d.Headers)
	}
	d, err = c.DeadLetter(t.Context(), "4", "nats")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(d.Payload)
	if d.PayloadEncoding != "base64" || !bytes.Equal(raw, bin.Data) || d.Reason != "corrupt" || d.PayloadSize != 5 {
		t.Fatalf("binary letter: %+v", d)
	}
	for _, id := range []string{"0", "-1", "01", "abc", "1e3", "18446744073709551616", strings.Repeat("9", 5000), "%00", "1;2"} {
		if _, err := c.DeadLetter(t.Context(), id, ""); status(err) != http.StatusBadRequest {
			t.Errorf("id %.20q: %v, want 400", id, err)
		}
	}
	for _, id := range []string{"5", "18446744073709551615"} {
		if _, err := c.DeadLetter(t.Context(), id, ""); status(err) != http.StatusNotFound {
			t.Errorf("id %s: %v, want 404", id, err)
		}
	}
	if _, err := c.DeadLetter(t.Context(), "2", "kafka"); status(err) != http.StatusBadRequest {
		t.Errorf("broker kafka (not configured): %v, want 400", err)
	}
}

func hasHeader(hs []httpapi.Header, k, v string) bool {
	for _, h := range hs {
		if h.Key == k && h.Value == v {
			return true
		}
	}
	return false
}

// Counts by reason sum every letter.
func TestDeadLetterCounts(t *testing.T) {
	c, _, _, _ := deadLetterServer(t, 150, 0)
	got, err := c.DeadLetterCounts(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Complete || got.Total != 150 || got.ByReason["expired"] != 50 || got.ByReason["publish_failed"] != 100 || len(got.ByReason) != 2 {
		t.Fatalf("counts: %+v", got)
	}
}

// A purge is a dry run first (nothing deleted), then deletes exactly the letters
// selected, by reason or by ids; each run is an audit entry with its actor.
func TestDeadLetterPurge(t *testing.T) {
	c, _, _, _ := deadLetterServer(t, 30, 0)
	c.Actor = "alice"
	dry, err := c.Purge(t.Context(), httpapi.RedriveRequest{Reason: "expired", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Matched != 10 || dry.Purged != 0 || dry.ByReason["publish_failed"].Left != 20 {
		t.Fatalf("dry run: %+v", dry)
	}
	if n := countLetters(t, c); n != 30 {
		t.Fatalf("after a dry run: %d letters, want 30", n)
	}
	res, err := c.Purge(t.Context(), httpapi.RedriveRequest{Reason: "expired"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 10 || res.Purged != 10 || res.OpID == "" {
		t.Fatalf("purge: %+v", res)
	}
	counts, err := c.DeadLetterCounts(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if counts.ByReason["expired"] != 0 || counts.Total != 20 {
		t.Fatalf("after the purge: %+v", counts)
	}
	res, err = c.Purge(t.Context(), httpapi.RedriveRequest{IDs: []string{"2", "3", "1", "99"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Purged != 2 || res.ByReason["not_found"].Other != 2 {
		t.Fatalf("purge of 2, 3 (letters), 1 (purged already), 99 (none): %+v", res)
	}
	if _, err := c.DeadLetter(t.Context(), "2", ""); status(err) != http.StatusNotFound {
		t.Fatalf("letter 2 after its purge: %v", err)
	}
	audit, err := c.Audit(t.Context(), 10, "")
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, e := range audit.Entries {
		ops = append(ops, e.Op+" "+e.Actor+" "+e.State+" "+string(e.Selector)+" "+map[bool]string{true: "dry", false: "real"}[e.DryRun])
	}
	want := []string{
		`purge alice done {"broker":"nats","ids":["2","3","1","99"]} real`,
		`purge alice done {"broker":"nats","reason":"expired"} real`,
		`purge alice done {"broker":"nats","reason":"expired"} dry`,
	}
	if strings.Join(ops, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit log:\n%s\nwant\n%s", strings.Join(ops, "\n"), strings.Join(want, "\n"))
	}
}

// countLetters counts the letters GET /v1/dead-letters lists.
func countLetters(t *testing.T, c *client.Client) int {
	t.Helper()
	return len(allLetters(t, c, nil))
}

// Attacker's pass on a purge: forged or overflowing selectors are 400 (nothing deleted,
// nothing audited), a cross-site browser request is 403, and purges at once delete each
// letter once.
func TestDeadLetterPurgeAttacks(t *testing.T) {
	c, _, _, _ := deadLetterServer(t, 60, 0)
	bad := []httpapi.RedriveRequest{
		{},
		{Reason: "expired", IDs: []string{"1"}},
		{Reason: strings.Repeat("a", 65)},
		{Reason: strings.Repeat("x", 60<<10)},
		{Reason: "Expired"},
		{Reason: "expired\nx"},
		{IDs: []string{"1", "0"}},
		{IDs: []string{"1", "../2"}},
		{IDs: []string{strings.Repeat("7", 30)}},
		{IDs: make([]string, 1001)},
		{Reason: "expired", Broker: "kafka"},
	}
	for _, req := range bad {
		_, err := c.Purge(t.Context(), req)
		if s := status(err); s != http.StatusBadRequest && s != http.StatusRequestEntityTooLarge {
			t.Errorf("purge %.60v: %v, want 400 or 413", req, err)
		}
	}
	if n := countLetters(t, c); n != 60 {
		t.Fatalf("after refused purges: %d letters, want 60", n)
	}
	if audit, err := c.Audit(t.Context(), 10, ""); err != nil || len(audit.Entries) != 0 {
		t.Fatalf("refused purges are not audited: %v %+v", err, audit.Entries)
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, c.Base+"/v1/dead-letters/purge", strings.NewReader(`{"reason":"expired"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site purge: %d, want 403", resp.StatusCode)
	}
	for _, path := range []string{"/v1/dead-letters/purge", "/v1/dead-letters/redrive"} {
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			req, _ := http.NewRequestWithContext(t.Context(), m, c.Base+path, nil)
			resp, err := c.HTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
				t.Fatalf("%s %s: %d Allow %q, want 405 Allow POST", m, path, resp.StatusCode, resp.Header.Get("Allow"))
			}
		}
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	purged, refused := 0, 0
	for range 4 {
		wg.Go(func() {
			res, err := c.Purge(t.Context(), httpapi.RedriveRequest{Reason: "publish_failed"})
			mu.Lock()
			defer mu.Unlock()
			if status(err) == http.StatusTooManyRequests {
				refused++
				return
			}
			if err != nil {
				t.Error(err)
			}
			purged += res.Purged
		})
	}
	wg.Wait()
	if purged != 40 || refused != 0 {
		t.Fatalf("four purges at once deleted %d (refused %d), want 40 once each", purged, refused)
	}
	if n := countLetters(t, c); n != 20 {
		t.Fatalf("after the purges: %d letters, want 20", n)
	}
}

// A purge cut at its time limit has deleted what it counted, answers more: true, and the
// letters it did not look at stay.
func TestDeadLetterPurgeTimeLimit(t *testing.T) {
	c, _, _, _ := deadLetterServer(t, 30, time.Nanosecond)
	first, err := c.Purge(t.Context(), httpapi.RedriveRequest{Reason: "publish_failed"})
	if err != nil {
		t.Fatal(err)
	}
	if !first.More || first.Purged > 1 {
		t.Fatalf("purge at a time limit of 1ns: %+v", first)
	}
	if n := countLetters(t, c); n != 30-first.Purged {
		t.Fatalf("%d letters after a cut purge of %d", n, first.Purged)
	}
}
