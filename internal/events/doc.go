// Package events carries the bridge's live events (GET /v1/events, docs/design.md "Live
// events"): a Hub per replica that egress and the message API emit into and tails read
// from through bounded buffers, and a Relay that shares them with the other replicas
// over Redis Pub/Sub only while some replica has tails.
package events
