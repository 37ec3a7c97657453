package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestDeadLettersCLI: `bridge dead-letters ls` prints the counts by reason and the
// letters, `show` one letter's headers and payload, and `purge` runs only the dry run
// until --yes, then deletes exactly the letters of the reason.
func TestDeadLettersCLI(t *testing.T) {
	s := newStack(t)
	target := s.name("billing.due")
	natsDeadLetters(t, s, target, 4, 2, false)
	b := startBridge(t, s.env)
	env := map[string]string{"BRIDGE_API_ADDR": b.APIAddr}
	out, err := runCLIEnv(t, env, "dead-letters", "ls")
	if err != nil || !strings.Contains(out, "# 6 dead letters (nats): target_not_allowed 4, invalid_delay 2") || strings.Count(out, "\n") != 8 {
		t.Fatalf("dead-letters ls: %v\n%s", err, out)
	}
	letters := listAll(t, &client.Client{Base: "http://" + b.APIAddr}, "invalid_delay", 10)
	out, err = runCLIEnv(t, env, "dead-letters", "show", letters[0].ID)
	if err != nil || !regexpLine(out, `reason\s+invalid_delay`) || !regexpLine(out, `  x-target\s+`+target) || !strings.Contains(out, "payload (5 bytes, text):\nbad-0\n") {
		t.Fatalf("dead-letters show: %v\n%s", err, out)
	}
	out, err = runCLIEnv(t, env, "dead-letters", "purge", "--reason", "invalid_delay")
	if err != nil || !regexpLine(out, `invalid_delay\s+2\s+0`) || !strings.Contains(out, "2 dead letters would be deleted: the same command with --yes deletes them") {
		t.Fatalf("dead-letters purge without --yes: %v\n%s", err, out)
	}
	out, err = runCLIEnv(t, env, "dead-letters", "purge", "--reason", "invalid_delay", "--yes")
	if err != nil || !regexpLine(out, `invalid_delay\s+2\s+0\s+0`) || !strings.Contains(out, "# deleted 2 of 2") {
		t.Fatalf("dead-letters purge --yes: %v\n%s", err, out)
	}
	out, err = runCLIEnv(t, env, "dead-letters", "ls", "--reason", "invalid_delay")
	if err != nil || !strings.Contains(out, "# 4 dead letters (nats): target_not_allowed 4\n") || strings.Contains(out, "bad-") {
		t.Fatalf("dead-letters ls after the purge: %v\n%s", err, out)
	}
	if out, err := runCLIEnv(t, env, "dead-letters", "purge", "--reason", "x", "1"); err == nil || !strings.Contains(out, "give --reason R or ids, not both") {
		t.Fatalf("purge with both: %v\n%s", err, out)
	}
}

// TestDeadLetterPurgeKilled: the replica serving a purge of 4,000 letters is killed
// (SIGKILL) halfway. What it deleted stays deleted, nothing else is touched, its audit
// entry reads interrupted once its lease ran out, and the same purge on another replica
// deletes the rest, each letter once (but a letter the killed one had claimed, held for a
// minute).
func TestDeadLetterPurgeKilled(t *testing.T) {
	s := newStack(t)
	dlq := s.name("delay.dlq")
	stream := s.createStream(t, "DLQ", dlq)
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	const n, keep = 4000, 50
	for i := range n + keep {
		m := nats.NewMsg(dlq)
		m.Header.Set("x-delay-error", map[bool]string{true: "publish_failed: down", false: "expired: late"}[i < n])
		m.Data = []byte(fmt.Sprint(i))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("letters not stored within 30s")
	}
	msgs := func() uint64 {
		info, err := js.Stream(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		return info.CachedInfo().State.Msgs
	}
	a := startBridge(t, s.env)
	ca := &client.Client{Base: "http://" + a.APIAddr, Actor: "alice"}
	done := make(chan error, 1)
	go func() {
		_, err := ca.Purge(context.Background(), httpapi.RedriveRequest{Reason: "publish_failed"})
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for msgs() > n+keep-n/4 {
		if time.Now().After(deadline) {
			t.Fatal("the purge deleted too little within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.Kill(t)
	if err := <-done; err == nil {
		t.Fatal("the purge answered although its replica was killed")
	}
	left := msgs()
	if left == n+keep || left <= keep {
		t.Fatalf("%d letters left when the replica was killed: want the middle", left)
	}
	t.Logf("killed with %d of %d deleted", n+keep-left, n)
	b := startBridge(t, s.env)
	cb := &client.Client{Base: "http://" + b.APIAddr}
	counts, err := cb.DeadLetterCounts(t.Context(), "")
	for err == nil && !counts.Complete && time.Now().Before(deadline.Add(30*time.Second)) {
		// a count reads for at most 3 s: a loaded machine (-race, CI) may need another go
		counts, err = cb.DeadLetterCounts(t.Context(), "")
	}
	if err != nil || !counts.Complete || counts.ByReason["expired"] != keep || uint64(counts.Total) != left {
		t.Fatalf("counts after the kill: %+v %v (%d in the stream)", counts, err, left)
	}
	page, err := cb.Audit(t.Context(), 1, "")
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Op != "purge" || page.Entries[0].Actor != "alice" {
		t.Fatalf("audit: %+v %v", page, err)
	}
	for e := page.Entries[0]; e.State != "interrupted"; e = findAudit(t, cb, e.OpID) {
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatalf("the killed purge's entry: %+v, want interrupted once its lease ran out", e)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The killed replica may have claimed one letter it did not delete: that claim holds
	// it for a minute (other_run), then a purge takes it.
	res, err := cb.Purge(t.Context(), httpapi.RedriveRequest{Reason: "publish_failed"})
	other := res.ByReason["publish_failed"].Other
	if err != nil || uint64(res.Purged+other+keep) != left || other > 1 || res.More {
		t.Fatalf("the purge again: %+v %v; %d letters were left", res, err, left)
	}
	if got := msgs(); got != uint64(keep+other) {
		t.Fatalf("%d letters left, want the %d expired ones and %d claimed", got, keep, other)
	}
}
