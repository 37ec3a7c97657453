// Package tracing sets up OpenTelemetry tracing from the standard OTEL_* variables and
// carries span contexts in header lists. With no OTLP endpoint configured it returns a
// no-op provider: no exporter, no goroutine, nothing recorded.
package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// IngressSpanKey holds, in a parked message's stored header list, the span context of the
// ingress span that parked it (traceparent syntax), so that the egress publish can link to
// it. It has the reserved prefix: never accepted from producers, never sent to a broker.
const IngressSpanKey = headers.ReservedPrefix + "ingress_span"

// Enabled reports whether environ (KEY=VALUE entries) configures an OTLP trace exporter:
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, and neither
// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none.
func Enabled(environ []string) bool {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	if strings.EqualFold(env["OTEL_SDK_DISABLED"], "true") || strings.EqualFold(env["OTEL_TRACES_EXPORTER"], "none") {
		return false
	}
	return env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "" || env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != ""
}

// Setup returns the tracer provider for environ and a shutdown function that flushes
// spans (bounded by its ctx). Not [Enabled]: a no-op provider. Enabled: spans batched and
// sent with OTLP over HTTP; the exporter and the SDK read the other OTEL_* variables
// (headers, protocol details, OTEL_SERVICE_NAME, OTEL_BSP_*, sampler) themselves. The
// exporter connects lazily, so an unreachable collector never stops the bridge.
func Setup(ctx context.Context, environ []string, version string) (trace.TracerProvider, func(context.Context) error, error) {
	if !Enabled(environ) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		serviceName.String("delaybridge"), serviceVersion.String(version)))
	if err != nil {
		res = resource.Default()
	}
	// resource.Default reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; they win.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// Active returns t, or nil when t makes no spans (nil, or a no-op tracer such as [Setup]'s
// provider gives when tracing is off). Ingress and egress start spans only with an active
// tracer, so that with tracing off no span, attribute or option is built per message.
func Active(t trace.Tracer) trace.Tracer {
	switch t.(type) {
	case nil, noop.Tracer, *noop.Tracer:
		return nil
	}
	return t
}

// Carrier adapts a header list to the OpenTelemetry propagators (names matched
// case-insensitively on Get; Set replaces every field of that name).
type Carrier struct{ List *headers.List }

var _ propagation.TextMapCarrier = Carrier{}

// Get returns the first value of key.
func (c Carrier) Get(key string) string {
	v, _ := c.List.Get(key)
	return v
}

// Set replaces key's fields with one field key: value.
func (c Carrier) Set(key, value string) {
	*c.List = c.List.Without(func(k string) bool { return strings.EqualFold(k, key) })
	c.List.Add(key, value)
}

// Keys lists the field names.
func (c Carrier) Keys() []string {
	out := make([]string, len(*c.List))
	for i, f := range *c.List {
		out[i] = f.Key
	}
	return out
}

// Resource attribute keys (OpenTelemetry semantic conventions).
const (
	serviceName    = attribute.Key("service.name")
	serviceVersion = attribute.Key("service.version")
)

// traceContext is the W3C propagator; used explicitly (no global propagator).
var traceContext = propagation.TraceContext{}

// Extract returns ctx with the remote span context of h's traceparent/tracestate, if valid.
func Extract(ctx context.Context, h headers.List) context.Context {
	return traceContext.Extract(ctx, Carrier{List: &h})
}

// FormatSpanContext writes sc in traceparent syntax, "" when sc is not valid.
func FormatSpanContext(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var l headers.List
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), Carrier{List: &l})
	v, _ := l.Get("traceparent")
	return v
}

// ParseSpanContext reads a [FormatSpanContext] value; the zero SpanContext when invalid.
func ParseSpanContext(s string) trace.SpanContext {
	l := headers.List{{Key: "traceparent", Value: s}}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), Carrier{List: &l}))
}
