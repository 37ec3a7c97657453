// Package monitor is the bridge's watch on Redis and the delay store, exported as
// Prometheus metrics and read by /readyz: the Redis health monitor (delaybridge_redis_up,
// delaybridge_redis_oom: a PING every second, never a Redis round trip per probe), the
// dataset watch (a Redis that came back empty), the store gauges of the shards this
// replica owns (read at scrape time, bounded per scrape), and the script timings and WAIT
// shortfalls of the store.
package monitor
