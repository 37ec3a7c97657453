package main

import (
	"fmt"
	"math"
)

// The targets the report checks. All but two are stated against a baseline measured in the
// same run (the minimal store, the JetStream ceiling, the empty-store burst, one replica),
// so that they hold on any machine; the fleet's commands per message and the idle commands
// per second are counts, not machine figures, and stay absolute.
const (
	targetSteadyCPU     = 1.2  // steady: Redis CPU per message <= this x the minimal store's (same AOF)
	targetSteadyP99Ms   = 2.0  // steady: lateness p99 <= the minimal store's p99 (same AOF) + this, ms
	targetKeyedCPU      = 1.5  // keyed steady: Redis CPU per message <= this x the plain steady row's (same run)
	targetVsCeiling     = 0.65 // burst: release rate >= this x the JetStream ceiling of the same run
	targetBacklog       = 0.9  // backlog: release rate >= this x the empty-store burst's
	targetFleetCmds     = 8.0  // fleet: Redis commands per message at the most replicas <= this
	targetFleetP99x     = 2.0  // fleet: lateness p99 at the most replicas <= this x one replica's p99 ...
	targetFleetP99Ms    = 50.0 // ... + this, ms
	targetIdleCmds      = 15.0 // idle: Redis commands per second per replica <= this
	targetClusterSpread = 1.5  // cluster: max / min per-master Redis CPU per message <= this
)

// benchKeys is the number of ordering keys of the keyed steady row.
const benchKeys = 1000

// fleetP99Bound is the fleet's lateness p99 bound: targetFleetP99x one replica's p99 +
// targetFleetP99Ms.
func fleetP99Bound(oneP99 float64) float64 { return targetFleetP99x*oneP99 + targetFleetP99Ms }

// verdict is "ok" when x <= limit, "not ok" when not, "?" when x was not measured.
func verdict(x, limit float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "?"
	case x <= limit:
		return "ok"
	default:
		return "not ok"
	}
}

// atLeast is "ok" when x >= limit, "not ok" when not, "?" when x was not measured.
func atLeast(x, limit float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "?"
	case x >= limit:
		return "ok"
	default:
		return "not ok"
	}
}

// targetsText is the report's list of targets, each with the baseline it is measured
// against.
func targetsText() string {
	return fmt.Sprintf(`- steady (paced 5k msgs/s, delays 0..1 s), delaybridge with 1 replica, NATS source, no WAIT,
  against the minimal store of the same run and the same AOF policy (everysec, and always when
  the x1 always variant runs): Redis CPU per message <= %gx the minimal store's; lateness p99
  <= the minimal store's p99 + %g ms.
- keyed steady (the steady row with every message under one of %d ordering keys), delaybridge
  x1 everysec: Redis CPU per message <= %gx the plain steady row's of the same run.
- burst (N due at one millisecond; 100k, 50k with -quick): release rate >= %g x the JetStream
  async publish ceiling of the same run; the bridge's CPU per released and per parked message
  are reported beside the ceiling's harness CPU per message, without a target of their own.
- backlog (-parked messages parked for an hour; 1M, 200k with -quick; then a burst on top):
  release rate >= %g x the release rate of the empty-store burst row of the same run and variant.
- fleet (R replicas on one redis-server, paced 400 and 5k msgs/s), at the most replicas of each
  rate (16; 8 with -quick): <= %g Redis commands per delivered message (a count, so absolute);
  lateness p99 <= %gx the p99 of one replica at the same rate + %g ms.
- idle: <= %g Redis commands per second per replica, with 16 and with 1024 shards.
- cluster: per-master Redis CPU per message within %gx (max / min).
`, targetSteadyCPU, targetSteadyP99Ms, benchKeys, targetKeyedCPU, targetVsCeiling, targetBacklog, targetFleetCmds, targetFleetP99x,
		targetFleetP99Ms, targetIdleCmds, targetClusterSpread)
}
