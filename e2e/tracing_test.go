package e2e

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace endpoint (POST /v1/traces, protobuf) keeping every
// span it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var ex collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &ex); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range ex.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// find returns the first span named name in trace traceID.
func (r *otlpReceiver) find(name string, traceID []byte) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.Name == name && bytes.Equal(s.TraceId, traceID) {
			return s
		}
	}
	return nil
}

// TestTraceSpans: with OTEL_EXPORTER_OTLP_ENDPOINT set, the bridge exports an ingress
// span (child of the producer's traceparent) and an egress publish span in the same trace,
// linked to the ingress span; the delivered message's traceparent is the producer's,
// unchanged, and the stored span context never reaches the target.
func TestTraceSpans(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	s := newStack(t)
	s.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = srv.URL
	s.env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
	startBridge(t, s.env)
	out := subscribe(t, s.nc, "orders.traced")

	const traceHex, parentHex = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	traceparent := "00-" + traceHex + "-" + parentHex + "-01"
	h := nats.Header{}
	h.Set("traceparent", traceparent)
	h.Set("x-delay", "300ms")
	h.Set("x-target", "orders.traced")
	if reply := request(t, s.nc, s.name("delay.in"), h, "traced"); reply["id"] == nil {
		t.Fatalf("reply %v", reply)
	}
	a := receive(t, out, 10*time.Second)
	if got := a.msg.Header.Get("traceparent"); got != traceparent {
		t.Fatalf("traceparent arrived as %q, want %q", got, traceparent)
	}
	for k := range a.msg.Header {
		if strings.HasPrefix(strings.ToLower(k), "_delaybridge") {
			t.Fatalf("internal header %s reached the target", k)
		}
	}

	traceID, _ := hex.DecodeString(traceHex)
	parentID, _ := hex.DecodeString(parentHex)
	var park, pub *tracepb.Span
	deadline := time.Now().Add(15 * time.Second)
	for (park == nil || pub == nil) && time.Now().Before(deadline) {
		park, pub = recv.find("delaybridge park", traceID), recv.find("delaybridge publish", traceID)
		time.Sleep(50 * time.Millisecond)
	}
	if park == nil || pub == nil {
		t.Fatalf("spans not exported: park %v publish %v", park != nil, pub != nil)
	}
	if !bytes.Equal(park.ParentSpanId, parentID) || !bytes.Equal(pub.ParentSpanId, parentID) {
		t.Fatalf("parents park %x publish %x, want the producer's span %s", park.ParentSpanId, pub.ParentSpanId, parentHex)
	}
	linked := false
	for _, l := range pub.Links {
		linked = linked || (bytes.Equal(l.TraceId, traceID) && bytes.Equal(l.SpanId, park.SpanId))
	}
	if !linked {
		t.Fatalf("publish span links %v, want the park span %x", pub.Links, park.SpanId)
	}
	t.Logf("park span %x -> publish span %x (linked), %s apart", park.SpanId, pub.SpanId,
		time.Duration(pub.StartTimeUnixNano-park.StartTimeUnixNano))
}
