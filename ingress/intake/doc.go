// Package intake is what every way into the bridge does to a message before it is parked:
// the header grammar of the message contract, applied once at the edge. [Rules.Prepare]
// turns an [Incoming] message (headers, payload, key, receipt time) into a
// delaystore.ParkRequest or a refusal whose [Reason] is the x-delay-error code; the parts
// it is built from are exported for the other callers of one grammar: [ParseDelay],
// [ParseDeliverAt] (the message API's filters and bulk selectors), [TargetPolicy.ParseTarget],
// [ValidateID], the compatibility headers of NATS message schedules and
// kafka-message-scheduler, and [Rules] (the BRIDGE_* variables of these limits, embedded by
// package config).
//
// Ingress (broker subscriptions) and the message API (httpapi/api) both use it,
// and share the two things they record about what came in: [Metrics]
// (delaybridge_messages_in_total, delaybridge_lookalike_headers_total) and [Lookalikes]
// (header names that look like a contract header's without being one).
//
// The header names and reason codes themselves live in contract, below this
// package; intake imports no broker, no watermill and no other component, and parsing is
// pure: only Lookalikes logs and Metrics counts.
package intake
