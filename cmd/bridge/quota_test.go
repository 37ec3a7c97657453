package main

import (
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/httpapi"
)

// TestPrintQuotas: `bridge targets` prints each quota pattern's use (a pattern without a
// limit here shows "-"), and nothing without quotas.
func TestPrintQuotas(t *testing.T) {
	var b strings.Builder
	if err := printQuotas(&b, nil); err != nil || b.Len() != 0 {
		t.Fatalf("no quotas: %q %v", b.String(), err)
	}
	if err := printQuotas(&b, []httpapi.QuotaResponse{{Pattern: "tenant-a.*", Limit: 1000, Parked: 950, Rejected: 7}, {Pattern: "old.*", Parked: 3}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[1]), " ") != "tenant-a.* 950 1000 95.0% 7" ||
		strings.Join(strings.Fields(lines[2]), " ") != "old.* 3 - - 0" {
		t.Fatalf("table:\n%s", b.String())
	}
}

// TestPrintFleetQuota: the fleet's refusals sum the brokers' dead letters and the API's 429s.
func TestPrintFleetQuota(t *testing.T) {
	var b strings.Builder
	printFleetQuota(&b, map[string]int64{"nats": 4, "kafka": 2, "http": 11})
	if want := "# the fleet refused 17 in the last hour: dead-lettered quota_exceeded 6, API 429 11\n"; b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
}
