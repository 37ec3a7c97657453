// Package failpoint makes the "crash between X and Y" rows of the fault suite
// deterministic. The bridge calls Inject at the points named below. In a normal build
// Inject is an empty function the compiler removes; only a binary built with
// `-tags failpoints` reads DELAYBRIDGE_FAILPOINTS and acts on it, so a production binary
// cannot be made to crash by its environment.
//
// DELAYBRIDGE_FAILPOINTS is a comma-separated list of `<point>=crash@<n>`: the process
// kills itself with SIGKILL (as `kill -9` would) the n-th time it reaches the point
// (n >= 1; `crash` alone means @1).
package failpoint

// The points.
const (
	// AfterPark: ingress parked a batch in Redis and has not acked its sources yet.
	AfterPark = "after-park"
	// AfterClaim: egress claimed a batch and has not published it yet.
	AfterClaim = "after-claim"
	// AfterPublish: egress published a batch, the target confirmed it, and the store has
	// not been told yet (no ack, no retry).
	AfterPublish = "after-publish"
)

// Env is the variable a failpoints build reads.
const Env = "DELAYBRIDGE_FAILPOINTS"

// ClockEnv is the variable a failpoints build reads for a test-only offset of the local
// wall clock (a Go duration such as "-30s"): Now returns time.Now plus that offset, so a
// fault test can run replicas whose clocks disagree (row E3 of FAULTS.md). libfaketime
// does not work on Go binaries, hence this hook.
const ClockEnv = "DELAYBRIDGE_TEST_CLOCK_OFFSET"

// ClaimAllEnv is the variable a failpoints build reads to make egress claim every shard
// whatever the fleet's ownership ("1"): two replicas so armed claim the same shards at
// once, which the claim lease must keep correct (fault row "forced ownership overlap").
const ClaimAllEnv = "DELAYBRIDGE_TEST_CLAIM_ALL"
