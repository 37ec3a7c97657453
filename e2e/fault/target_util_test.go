//go:build fault

package fault

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/httpapi"
	apiclient "github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// The T rows (docs/faults.md) check docs/contract.md section 3, "Only its own target":
// whatever happened to Redis, a message is published to its own x-target and nowhere else.

// Headers of every message the targetChecker sends: its number and its own target.
const (
	seqHeader  = "seq"
	wantHeader = "want-target"
)

// dlqSubject is the bridge's default dead-letter subject (BRIDGE_DLQ_SUBJECT).
const dlqSubject = "delay.dlq"

// targetChecker sends messages through the message API (POST /v1/messages), each to its
// own target (headers seq and want-target, the payload names both), and watches every
// subject with one core subscription to ">": an arrival on the message's own target is a
// delivery (copies, early and lateness counted as arrivals does); one on the dead-letter
// subject a dead letter (by the reason of its x-delay-error); one on any other subject,
// the bridge's own ingress delay.in included, a WRONG TARGET.
type targetChecker struct {
	t *testing.T
	arrivals
	want  map[string]string   // seq -> its own target
	ids   map[string]string   // x-delay-id (the API's answer) -> seq
	wrong map[string][]string // seq -> the other subjects it arrived on
	dead  map[string]string   // seq -> reason of its dead letter
	// anonDead counts dead letters by reason that name no message of the checker
	// (neither seq nor a known x-delay-id survived).
	anonDead map[string]int
}

func newTargetChecker(t *testing.T, s *stack) *targetChecker {
	t.Helper()
	c := &targetChecker{t: t, arrivals: newArrivals(), want: map[string]string{}, ids: map[string]string{},
		wrong: map[string][]string{}, dead: map[string]string{}, anonDead: map[string]int{}}
	nc := testnats.Connect(t, s.nats.URL())
	sub, err := nc.Subscribe(">", c.arrive)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

func (c *targetChecker) arrive(m *nats.Msg) {
	if strings.HasPrefix(m.Subject, "$") || strings.HasPrefix(m.Subject, "_INBOX.") {
		return // JetStream API, acks and replies
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	seq := m.Header.Get(seqHeader)
	if seq == "" {
		seq = c.ids[m.Header.Get("x-delay-id")]
	}
	if m.Subject == dlqSubject {
		reason, _, _ := strings.Cut(m.Header.Get("x-delay-error"), ":")
		if _, ours := c.want[seq]; !ours {
			c.anonDead[reason]++
			return
		}
		c.dead[seq] = reason
		return
	}
	want, ours := c.want[seq]
	switch {
	case !ours:
		return // not a message of this test (the streams' own traffic)
	case m.Subject == want:
		c.arrivedLocked(seq, m.Header.Get("x-delay-due"), now)
	default:
		c.wrong[seq] = append(c.wrong[seq], m.Subject)
	}
}

// post sends n messages through b's message API, 8 at a time: message i to target(i)
// with delay delay(i). A request the API refuses for a moment (503, 429, no answer) is
// sent again until it is answered 201 or 30 s passed (t.Errorf then); a request that
// was parked but not answered may so be parked twice: a duplicate, allowed and counted.
// It returns the seqs of the messages answered 201: from then on each one is the bridge's
// to deliver.
func (c *targetChecker) post(b *e2etest.Bridge, prefix string, n int, target func(int) string, delay func(int) time.Duration) []string {
	c.t.Helper()
	api := &apiclient.Client{Base: "http://" + b.APIAddr, HTTP: &http.Client{Timeout: 10 * time.Second}}
	var (
		mu   sync.Mutex
		seqs []string
		errs []error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				seq, to, d := fmt.Sprintf("%s-%d", prefix, i), target(i), delay(i)
				id, err := c.postOne(api, seq, to, d)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					seqs = append(seqs, seq)
					c.mu.Lock()
					c.ids[id] = seq
					c.mu.Unlock()
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if i == 5 {
			c.t.Errorf("... %d requests failed in all", len(errs))
			break
		}
		c.t.Error(err)
	}
	return seqs
}

// postOne posts one message until it is answered 201 and returns its id.
func (c *targetChecker) postOne(api *apiclient.Client, seq, target string, d time.Duration) (string, error) {
	payload := fmt.Sprintf(`{"seq":%q,"target":%q}`, seq, target)
	req := httpapi.PostRequest{
		Target:  target,
		Delay:   []byte(strconv.FormatInt(d.Milliseconds(), 10)),
		Headers: map[string]string{seqHeader: seq, wantHeader: target},
		Payload: &payload,
	}
	c.mu.Lock()
	c.want[seq] = target
	c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.expect(seq, d)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := api.Send(ctx, req)
		cancel()
		if err == nil {
			return resp.ID, nil
		}
		var apiErr *apiclient.APIError
		if errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable && apiErr.Status != http.StatusTooManyRequests {
			return "", fmt.Errorf("post %s to %s: %w", seq, target, err)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("post %s to %s: not accepted within 30 s: %w", seq, target, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// targetReport is what the targetChecker counted for a set of messages.
type targetReport struct {
	messages  int
	delivered int // arrived on its own target (at least once)
	// wrong is the messages that arrived at least once on a subject other than their
	// own target; wrongCopies all such arrivals.
	wrong, wrongCopies int
	dead               map[string]int // messages dead-lettered, by reason
	lost               int            // neither delivered to its own target nor dead-lettered
	dups               int            // extra copies on the own target
	early              int            // early arrivals of any message of the checker
	examples           []string       // a few wrong targets: seq, its target, where it went
}

func (r targetReport) String() string {
	return fmt.Sprintf("messages %d: delivered to their own target %d, WRONG TARGET %d (%d publishes), dead-lettered %v, "+
		"not delivered %d, early %d, duplicate %d", r.messages, r.delivered, r.wrong, r.wrongCopies, r.dead, r.lost, r.early, r.dups)
}

// settled waits up to timeout until every seq arrived somewhere (its own target, another
// subject, or the dead-letter subject), then 1.5 s more for late and wrong copies, and
// counts.
func (c *targetChecker) settled(seqs []string, timeout time.Duration) targetReport {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		open := 0
		for _, s := range seqs {
			if c.copies[s] == 0 && len(c.wrong[s]) == 0 && c.dead[s] == "" {
				open++
			}
		}
		c.mu.Unlock()
		if open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	return c.count(seqs)
}

// count counts seqs as they stand.
func (c *targetChecker) count(seqs []string) targetReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := targetReport{messages: len(seqs), dead: map[string]int{}, early: len(c.early)}
	for _, s := range seqs {
		if w := c.wrong[s]; len(w) > 0 {
			r.wrong++
			r.wrongCopies += len(w)
			if len(r.examples) < 5 {
				r.examples = append(r.examples, fmt.Sprintf("%s (target %s) published to %s", s, c.want[s], strings.Join(w, ", ")))
			}
		}
		if reason := c.dead[s]; reason != "" {
			r.dead[reason]++
		}
		switch n := c.copies[s]; {
		case n > 0:
			r.delivered++
			r.dups += n - 1
		case c.dead[s] == "":
			r.lost++
		}
	}
	return r
}

// anonDeadLetters is the dead letters, by reason, that named no message of the checker.
func (c *targetChecker) anonDeadLetters() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.anonDead)
}

// requireOwnTarget fails the test when a message of r went to another target or came
// early: the promise of every T row, whatever happened to the message otherwise.
func (c *targetChecker) requireOwnTarget(name string, r targetReport) {
	c.t.Helper()
	c.t.Logf("%s: %s", name, r)
	for _, e := range r.examples {
		c.t.Logf("  wrong target: %s", e)
	}
	if r.wrong != 0 || r.early != 0 {
		c.mu.Lock()
		c.reportEarlyLocked(c.t)
		c.mu.Unlock()
		c.t.Errorf("%s: %d of %d messages published to another target than their own, %d early", name, r.wrong, r.messages, r.early)
	}
}

// requireDelivered fails the test unless every message of r was delivered to its own
// target: none lost, none dead-lettered, none to another target, none early.
func (c *targetChecker) requireDelivered(name string, r targetReport) {
	c.t.Helper()
	c.requireOwnTarget(name, r)
	if r.delivered != r.messages || len(r.dead) != 0 {
		c.t.Errorf("%s: %d of %d delivered to their own target (dead-lettered %v)", name, r.delivered, r.messages, r.dead)
	}
}

// targets returns the n subjects prefix0 ... prefix<n-1>, in order.
func targets(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// roundRobin is message i -> names[i mod len(names)].
func roundRobin(names []string) func(int) string {
	return func(i int) string { return names[i%len(names)] }
}

// reversed is names in reverse order (a copy).
func reversed(names []string) []string {
	out := slices.Clone(names)
	slices.Reverse(out)
	return out
}

// fixed is a delay of d for every message.
func fixed(d time.Duration) func(int) time.Duration {
	return func(int) time.Duration { return d }
}
