// Package egress publishes due messages to their targets. [Egress] assembles three parts.
//
// The fleet membership (owner.go) heartbeats this replica into the fleet and decides, by
// rendezvous hashing over the live members, which shards it claims.
//
// One scheduler per replica (scheduler.go, shards.go, exchange.go), a single goroutine,
// serves every owned shard: it sleeps until the earliest shard head is due (Redis server
// time, mapped onto the local clock by clock.go), is woken early when any replica parks
// an earlier message, and makes one store round trip at a time (Claimer.Exchange): the
// acks and retries completed since the last one, and a claim into the free capacity of
// every owned shard that is due. What it claims it hands, as a batch, to the deliver
// func it was given; the settlements come back through a settle func and ride with the
// next round trip.
//
// The delivery (deliver.go, outcome.go, deadletter.go, recurring.go, expiry.go) owns the
// publishers, the per-target in-flight limit (limit.go) and rate (rate.go), the failure
// log (faillog.go) and the metrics of outcomes. Its one entry, submit, splits a batch by
// target and publishes each target group through watermill in its own goroutine, so no
// target waits for another; a group's settlement goes back as soon as its own Publish
// returns: acks for the confirmed and the dead-lettered messages, next occurrences for
// recurring ones, retries with exponential backoff for the failed ones (dead-lettered
// after MaxAttempts or a permanent rejection), put-backs for those over their target's
// in-flight limit or rate.
//
// Egress imports no broker package; it sees brokers as message.Publisher and the store as
// a Claimer.
package egress
