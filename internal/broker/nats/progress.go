package nats

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// progress reports the JetStream messages of one subscription that are fetched and not
// yet settled in progress (InProgress), so that the server does not redeliver a message
// its receiver is still working on (a park waiting for Redis). One ticker per
// subscription walks the messages, rather than a timer and a context watcher per message (a
// goroutine per message on the park path cost too much CPU). A message is reported when at
// least 3/4 of every (AckWait/2) has passed since its fetch or its last report; the
// ticker runs every every/4, so reports are between 3/4 every and every apart, as the
// former per-message timer's every at the most. A message stops being reported when it
// is settled or handed back (done), or max after its fetch. Safe for concurrent use.
type progress struct {
	every, max time.Duration
	log        *slog.Logger

	mu   sync.Mutex
	head tracked // sentinel of the list of tracked messages, oldest first
	due  []jetstream.Msg
}

// tracked is one message that progress reports, until done.
type tracked struct {
	p          *progress
	prev, next *tracked
	jm         jetstream.Msg
	last       time.Time // fetch or last report
	until      time.Time // fetch + max
}

// newProgress returns the progress of a subscription with AckWait ackWait and
// MaxProgress maxProgress (negative: nil, which tracks nothing).
func newProgress(ackWait, maxProgress time.Duration, log *slog.Logger) *progress {
	if maxProgress < 0 {
		return nil
	}
	p := &progress{every: max(ackWait/2, time.Millisecond), max: maxProgress, log: log}
	p.head.prev, p.head.next = &p.head, &p.head
	return p
}

// track starts reporting jm, fetched now, with t (storage the caller provides, zero, so
// that a message costs no allocation of its own here) and returns t. nil p: returns nil.
func (p *progress) track(t *tracked, jm jetstream.Msg) *tracked {
	if p == nil {
		return nil
	}
	now := time.Now()
	*t = tracked{p: p, jm: jm, last: now, until: now.Add(p.max)}
	p.mu.Lock()
	t.prev, t.next = p.head.prev, &p.head
	p.head.prev.next = t
	p.head.prev = t
	p.mu.Unlock()
	return t
}

// done stops reporting t (settled or handed back). Idempotent; nil t: no-op.
func (t *tracked) done() {
	if t == nil {
		return
	}
	t.p.mu.Lock()
	t.unlink()
	t.p.mu.Unlock()
}

// unlink removes t from its list; the caller holds t.p.mu.
func (t *tracked) unlink() {
	if t.prev == nil {
		return
	}
	t.prev.next, t.next.prev = t.next, t.prev
	t.prev, t.next, t.jm = nil, nil, nil
}

// run reports the tracked messages until ctx ends (the subscription stopped: its
// messages' contexts end with it, and so do their reports). nil p: returns at once.
func (p *progress) run(ctx context.Context) {
	if p == nil {
		return
	}
	tick := time.NewTicker(max(p.every/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			p.report(now)
		}
	}
}

// report sends InProgress for every tracked message due for one at now, and drops those
// past their max.
func (p *progress) report(now time.Time) {
	p.mu.Lock()
	due := p.due[:0]
	for t := p.head.next; t != &p.head; {
		next := t.next
		switch {
		case now.After(t.until):
			t.unlink()
		case now.Sub(t.last) >= p.every*3/4:
			t.last = now
			due = append(due, t.jm)
		}
		t = next
	}
	p.mu.Unlock()
	for i, jm := range due {
		if err := jm.InProgress(); err != nil {
			p.log.Debug("jetstream in progress", "error", err)
		}
		due[i] = nil
	}
	p.due = due[:0] // only run's goroutine reports
}
