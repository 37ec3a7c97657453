package intake

import (
	"os"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// benchMetadata is a typical message's metadata: its control headers and a few of the
// application's own, none of them near a contract header name.
var benchMetadata = map[string]string{
	"x-delay": "30s", "x-target": "orders.timeout", "x-delay-id": "order-1042",
	"content-type": "application/json", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"tenant": "acme", "x-request-id": "5d1c2a", "Nats-Msg-Id": "abc",
}

// BenchmarkIngressHeaders is the per-message header work of ingress's hot path: the header
// list from the metadata, Prepare, and the look-alike check (issue 23, item 10).
func BenchmarkIngressHeaders(b *testing.B) {
	r := prepareRules()
	r.MaxHeaderBytes = 4096
	now := time.Now()
	lk := NewLookalikes(nil, nil, nil)
	check := os.Getenv("LOOKALIKE_BENCH_OFF") == "" // "before": LOOKALIKE_BENCH_OFF=1
	b.ReportAllocs()
	for b.Loop() {
		h := headers.FromMetadata(benchMetadata)
		if check {
			lk.Check(h, "nats:delay.in")
		}
		if _, err := r.Prepare(Incoming{Headers: h, Payload: []byte("{}"), Broker: BrokerNATS, Source: "nats:delay.in", SourceID: "js:S:1", Received: now}, now); err != nil {
			b.Fatal(err)
		}
	}
}
