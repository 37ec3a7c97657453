// Package broker holds what the broker adapters (internal/broker/nats,
// internal/broker/kafka) share: the per-message publish error and the permanent
// rejection that egress recognises.
package broker
