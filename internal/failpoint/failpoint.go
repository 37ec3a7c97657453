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

// ClaimAllEnv is the variable a failpoints build reads to make egress claim every shard
// whatever the fleet's ownership ("1"): two replicas so armed claim the same shards at
// once, which the claim lease must keep correct (fault row "forced ownership overlap").
const ClaimAllEnv = "DELAYBRIDGE_TEST_CLAIM_ALL"
