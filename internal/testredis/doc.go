// Package testredis runs a private redis-server for tests: a child process on a free
// loopback port with its own data directory and an fsync-always AOF, killed with SIGKILL
// when the test ends (or when the test binary dies).
//
// Tests that only need a server call [URL]; tests that crash and restart Redis call
// [Start]. Every test uses its own key prefix ([Prefix]) so that tests can share a server
// (BRIDGE_TEST_REDIS_URL); nothing here ever flushes a database.
//
// [StartCluster] runs a Redis Cluster (masters, optional replicas, a password) with slot
// moves ([Cluster.MoveSlot]) and failover waits; [StartSentinel] runs 1 primary, 2 replicas
// and 3 sentinels (`redis-server --sentinel`) with kill, switchover and failover waits.
package testredis
