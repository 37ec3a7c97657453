package ingress

import (
	"slices"
	"testing"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// TestDisarmNATSHeaders: a NATS dead letter keeps every original header, with Nats-* ones
// renamed so that a JetStream stream on the dead-letter subject does not act on them.
func TestDisarmNATSHeaders(t *testing.T) {
	in := headers.List{{Key: "Nats-Schedule", Value: "@at 2030-01-01T00:00:00Z"}, {Key: "k", Value: "1"}, {Key: "nats-rollup", Value: "all"}, {Key: "k", Value: "2"}}
	md := headers.ToMetadata(in, map[string]string{headers.MetaKafkaKey: "key"})
	got := headers.FromMetadata(disarmNATSHeaders(md))
	want := headers.List{{Key: "x-delay-original-Nats-Schedule", Value: "@at 2030-01-01T00:00:00Z"}, {Key: "k", Value: "1"}, {Key: "x-delay-original-nats-rollup", Value: "all"}, {Key: "k", Value: "2"}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if v := disarmNATSHeaders(md)[headers.MetaKafkaKey]; v != "key" {
		t.Fatalf("reserved metadata lost: %q", v)
	}
	plain := headers.ToMetadata(headers.List{{Key: "k", Value: "1"}}, nil)
	if out := disarmNATSHeaders(plain); len(out) != 1 || out["k"] != "1" {
		t.Fatalf("changed a list without Nats-* headers: %v", out)
	}
}
