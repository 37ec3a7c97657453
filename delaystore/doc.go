// Package delaystore is the Redis delay store of delaybridge: messages parked in sharded
// sorted sets until due, claimed under a visibility lease, and deleted only after the
// caller confirmed their delivery.
//
// Every state change is one embedded Lua script (lua/*.lua) that takes its time from the
// Redis server (TIME), so all replicas share one clock and nothing is ever claimed before
// it is due. Every key of a shard carries the hash tag {prefix:shard}, so the store works
// unchanged on Redis Cluster. Claim, ack, retry and cancel declare allow-oom (Redis 7), so
// a full Redis keeps delivering while it refuses new parks (scripts.go). The package knows
// nothing of brokers or watermill; the data layout is described in docs/design.md.
package delaystore
