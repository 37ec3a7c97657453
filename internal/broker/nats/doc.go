// Package nats is delaybridge's watermill adapter for NATS: a [Publisher] and a
// [Subscriber] over nats.go, core NATS and JetStream (the new jetstream API).
//
// Publishing: a subject captured by a JetStream stream is published with a publish
// acknowledgement and the message UUID as Nats-Msg-Id (JetStream drops a repeat within
// its duplicate window); any other subject gets a core publish and a flush. Publish
// returns only when every message of the call is confirmed; per-message failures come
// back as a [*broker.PublishError].
//
// Subscribing: a topic captured by the configured stream is consumed through a durable
// pull consumer (created or updated by the adapter; streams are never created or
// altered); any other topic through a core queue subscription. Messages are handed out
// without waiting for the previous one's Ack, so the consumer can batch acks; in-flight
// messages are bounded.
//
// Headers: NATS headers may repeat, watermill metadata is a map. The mapping is
// [headers.ToMetadata] / [headers.FromMetadata]: repeated values keep their order, header
// names keep their case, and metadata keys with the reserved prefix `_delaybridge_` never
// go on the wire. A header with that prefix that arrives from it is kept inside
// [headers.MetaHeaders], never taken as the adapter's own metadata (intake refuses it).
// NATS has no null header value: a headers.Header.Null one is sent empty.
//
// The adapter does not own the *nats.Conn: [Connect] makes one with sensible reconnect
// options, and the caller closes it after closing publishers and subscribers.
package nats
