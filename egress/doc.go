// Package egress publishes due messages to their targets. One worker per shard sleeps
// until the shard's earliest due time (Redis server time, mapped onto the local monotonic
// clock), is woken early when any replica parks an earlier message, claims a batch under a
// lease, publishes it grouped by target through watermill publishers, and removes each
// message from the store only after its broker confirmed it. Failed publishes are retried
// with exponential backoff and dead-lettered after MaxAttempts.
//
// Egress imports no broker package; it sees brokers as message.Publisher and the store as
// a Claimer.
package egress
