// Package delaystore is the Redis delay store of delaybridge: messages parked in sharded
// sorted sets until due, claimed under a visibility lease, and deleted only after the
// caller confirmed their delivery.
//
// Every state change is one embedded Lua script (lua/*.lua, the one table in scripts.go)
// that takes its time from the Redis server (TIME), so all replicas share one clock and
// nothing is ever claimed before it is due. Every key of a shard carries the hash tag
// {prefix:shard}, so the store works unchanged on Redis Cluster. Claim, ack, retry and
// cancel declare allow-oom (Redis 7), so a full Redis keeps delivering while it refuses
// new parks (scripts.go). The package knows nothing of brokers or watermill; the data
// layout is described in docs/design.md.
//
// The delivery path: the layout and shard of an id (layout.go), the stored envelope
// (envelope.go) and interned names (names.go), Park with its quota check (park.go,
// quota.go), Claim, Ack, Retry and Exchange (claim.go, exchange.go), Cancel (cancel.go),
// wake-ups (wake.go), dataset epochs (epoch.go), the fleet's membership (fleet.go),
// publish slots (rate.go), the script calls and their WAIT (pipeline.go, groups.go,
// wait.go). The operator's primitives, which package admin builds its listing, bulk
// changes, audit log, targets and quotas reports and fleet counts on, each a read or one
// script: Scan (scan.go), Change, Versions and the saved progress of bulk operations
// (change.go), the audit log's records (audit.go), ParkedByTarget (counts.go),
// QuotaParked (quota.go), the stats buckets (stats.go) and CursorKey (cursorkey.go). No
// file of the delivery path calls them.
package delaystore
