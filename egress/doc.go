// Package egress publishes due messages to their targets. One worker per shard sleeps
// until the shard's earliest due time (Redis server time, mapped onto the local monotonic
// clock), is woken early when any replica parks an earlier message, claims a batch under a
// lease into the shard's free capacity, and publishes it grouped by target through
// watermill publishers, each target group on its own (scheduler.go, deliver.go). A group
// is settled when its own publish returns: the shard's settler (settle.go) removes the
// confirmed messages from the store and reschedules the failed ones, coalescing what is
// ready into one Ack and one Retry call. A target holds at most TargetInflight messages in
// flight (limit.go); the rest are put back untried. Failed publishes are retried with
// exponential backoff and dead-lettered after MaxAttempts.
//
// Egress imports no broker package; it sees brokers as message.Publisher and the store as
// a Claimer.
package egress
