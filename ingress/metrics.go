package ingress

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/contract"
)

// Metrics are the counters of messages coming in, shared by every way in (ingress's
// broker subscriptions and the message API, as broker "http"); it is the
// [intake.LookalikeCounter] of the shared [intake.Lookalikes]. A nil *Metrics records
// nothing; safe for concurrent use.
type Metrics struct {
	messages   *prometheus.CounterVec
	lookalikes *prometheus.CounterVec
}

// NewMetrics registers the metrics of messages coming in with reg:
// delaybridge_messages_in_total{broker, result, reason}, result one of parked, cancelled (a
// cancel that removed a pending message), cancel_not_found (a cancel that found none: the
// store remembers it), cancel_in_delivery (a cancel of a message in delivery: not
// stopped), cancelled_on_arrival (a message published before a remembered
// cancel of its id: acked, not parked), invalid (reason = the x-delay-error code), nacked
// or already_delivered (a redelivery of a source message delivered within the store's
// tombstone TTL: acked, not parked again).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delaybridge_messages_in_total",
			Help: "Messages taken from a source, by broker and result (parked, cancelled, cancel_not_found, cancel_in_delivery, cancelled_on_arrival, invalid, nacked, already_delivered); reason is set for invalid.",
		}, []string{"broker", "result", "reason"}),
	}
	m.lookalikes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "delaybridge_lookalike_headers_total",
		Help: "Incoming headers (brokers and the message API) whose name looks like a contract header's without being one (x-dealy), by the contract header it resembles; the message was handled without it.",
	}, []string{"header"})
	for _, name := range contract.Read {
		m.lookalikes.WithLabelValues(name) // every series exists from the start, at 0
	}
	for _, c := range []prometheus.Collector{m.messages, m.lookalikes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register ingress metrics: %w", err)
		}
	}
	return m, nil
}

// Count records n messages from broker ("nats", "kafka"; the message API counts as
// "http") with result parked, cancelled, cancel_not_found, cancel_in_delivery, cancelled_on_arrival, nacked
// or already_delivered.
func (m *Metrics) Count(broker, result string, n int) {
	if m != nil {
		m.messages.WithLabelValues(broker, result, "").Add(float64(n))
	}
}

// Invalid records a message from broker refused for reason (an x-delay-error code, see
// intake.Reason).
func (m *Metrics) Invalid(broker, reason string) {
	if m != nil {
		m.messages.WithLabelValues(broker, "invalid", reason).Inc()
	}
}

// Lookalike records an incoming header that looks like the contract header named header.
func (m *Metrics) Lookalike(header string) {
	if m != nil {
		m.lookalikes.WithLabelValues(header).Inc()
	}
}
