package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/delaybridge/delaybridge/internal/headers"
)

func TestEnabled(t *testing.T) {
	tests := []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"OTEL_SERVICE_NAME=x"}, false},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318"}, true},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://c:4318/v1/traces"}, true},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT="}, false},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318", "OTEL_SDK_DISABLED=true"}, false},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318", "OTEL_TRACES_EXPORTER=none"}, false},
	}
	for _, tt := range tests {
		if got := Enabled(tt.env); got != tt.want {
			t.Errorf("Enabled(%q) = %v, want %v", tt.env, got, tt.want)
		}
	}
}

// TestSetupDisabledIsNoop: without an endpoint no span records, so nothing is stored
// with a message.
func TestSetupDisabledIsNoop(t *testing.T) {
	tp, shutdown, err := Setup(context.Background(), nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	_, span := tp.Tracer("t").Start(context.Background(), "x")
	if span.IsRecording() {
		t.Fatal("no-op provider records")
	}
}

func TestSpanContextRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	l := headers.List{{Key: "Traceparent", Value: tp}}
	sc := ParseSpanContext(tp)
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("parsed %v", sc)
	}
	if got := FormatSpanContext(sc); got != tp {
		t.Fatalf("formatted %q, want %q", got, tp)
	}
	if ParseSpanContext("garbage").IsValid() || FormatSpanContext(ParseSpanContext("")) != "" {
		t.Fatal("invalid span context accepted")
	}
	if sc := ParseSpanContext(Carrier{List: &l}.Get("traceparent")); !sc.IsValid() {
		t.Fatal("carrier does not match names case-insensitively")
	}
}

func TestActive(t *testing.T) {
	if Active(nil) != nil || Active(noop.NewTracerProvider().Tracer("x")) != nil {
		t.Error("a nil or no-op tracer is active")
	}
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	if Active(tp.Tracer("x")) == nil {
		t.Error("an SDK tracer is not active")
	}
}
