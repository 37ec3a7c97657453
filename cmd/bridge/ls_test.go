package main

import (
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/httpapi"
)

// TestPrintListedBound: bridge ls shows a debounced message's max wait and bound beside
// its due time, and nothing for a message without one.
func TestPrintListedBound(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	due := now.Add(2 * time.Second).UnixMilli()
	var b strings.Builder
	err := printListed(&b, httpapi.ListResponse{Messages: []httpapi.ListedMessage{
		{ID: "digest-1", Target: "nats:digest", Due: due, Scheduled: due, MaxWait: 3000, DueBy: now.Add(3 * time.Second).UnixMilli()},
		{ID: "plain", Target: "nats:digest", Due: due, Scheduled: due},
	}}, now)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[1], "(max wait 3s: by 10:00:03.000)") || strings.Contains(lines[2], "max wait") {
		t.Fatalf("bridge ls:\n%s", b.String())
	}
}

// TestPrintListedOrderingKey: bridge ls shows a keyed message's ordering key beside its
// id, quoted, and the message that holds it beside its due time; nothing for a message
// without key.
func TestPrintListedOrderingKey(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	due := now.Add(2 * time.Second).UnixMilli()
	var b strings.Builder
	err := printListed(&b, httpapi.ListResponse{Messages: []httpapi.ListedMessage{
		{ID: "o1-created", Target: "nats:orders", Due: due, Scheduled: due, OrderingKey: "order 1"},
		{ID: "o1-paid", Target: "nats:orders", Due: due, Scheduled: due, OrderingKey: "order 1", HeldBy: "o1-created"},
		{ID: "plain", Target: "nats:orders", Due: due, Scheduled: due},
	}}, now)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.HasPrefix(lines[1], `o1-created (key "order 1")`) || strings.Contains(lines[1], "held by") ||
		!strings.HasPrefix(lines[2], `o1-paid (key "order 1")`) || !strings.Contains(lines[2], "(held by o1-created)") ||
		strings.Contains(lines[3], "key") || strings.Contains(lines[3], "held by") {
		t.Fatalf("bridge ls:\n%s", b.String())
	}
}

// TestPrintListedEveryAndTotal: bridge ls shows a recurring message's schedule in EVERY
// ("-" for one that fires once) and how many match in all, saying when that is an estimate.
func TestPrintListedEveryAndTotal(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	due := now.Add(2 * time.Second).UnixMilli()
	page := httpapi.ListResponse{Messages: []httpapi.ListedMessage{
		{ID: "tick", Target: "nats:t", Due: due, Scheduled: due, Every: "0 9 * * 1-5"},
		{ID: "once", Target: "nats:t", Due: due, Scheduled: due},
	}, Total: 7}
	var b strings.Builder
	if err := printListed(&b, page, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.HasSuffix(lines[0], "EVERY") || !strings.HasSuffix(lines[1], "0 9 * * 1-5") || !strings.HasSuffix(lines[2], " -") ||
		lines[3] != "7 match in all" {
		t.Fatalf("bridge ls:\n%s", b.String())
	}
	page.TotalEstimated = true
	b.Reset()
	if err := printListed(&b, page, now); err != nil || !strings.Contains(b.String(), "about 7 match in all (an estimate") {
		t.Fatalf("bridge ls, estimated:\n%s", b.String())
	}
}
