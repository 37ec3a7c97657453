package httpapi

// FleetOverviewResponse is the 200 body of GET /v1/overview?scope=fleet: the counts every
// replica added to the fleet's buckets in Redis, summed (docs/design.md, "Fleet-wide
// view"): over the last hour by minute and over the last 7 days by hour, each window with
// its totals and its series, oldest first; the live replicas now; and this replica's view
// of Redis. The buckets of the current minute and hour are still filling (each replica adds
// its counts every few seconds).
type FleetOverviewResponse struct {
	Scope    string      `json:"scope"` // "fleet"
	Now      int64       `json:"now"`   // unix ms
	Replicas int64       `json:"replicas"`
	LastHour FleetWindow `json:"last_hour"`
	Last7d   FleetWindow `json:"last_7d"`
	Redis    string      `json:"redis"`
}

// FleetWindow is one window of the fleet's counts: Step (ms) per bucket, from From (unix
// ms, the first bucket's start), Total summed over Series.
type FleetWindow struct {
	Step   int64         `json:"step"`
	From   int64         `json:"from"`
	Total  FleetCounts   `json:"total"`
	Series []FleetCounts `json:"series"`
}

// FleetCounts are the fleet's counts of one bucket (or a window's total, At = its start):
// messages in and out by result, dead letters by reason (the brokers' invalid messages and
// egress's dead letters), and the lateness of the deliveries counted in it (Delivered; p50
// and p99 in ms from the summed histogram buckets, null without a delivery).
type FleetCounts struct {
	At           int64            `json:"at"`
	In           map[string]int64 `json:"in"`
	Out          map[string]int64 `json:"out"`
	DeadLettered map[string]int64 `json:"dead_lettered"`
	Delivered    int64            `json:"delivered"`
	LatenessP50  *float64         `json:"lateness_p50_ms"`
	LatenessP99  *float64         `json:"lateness_p99_ms"`
	// QuotaRejected is the messages the fleet refused for a full BRIDGE_TARGET_QUOTA, by
	// where they came from: "nats" or "kafka" (dead-lettered quota_exceeded, also counted
	// in DeadLettered) or "http" (the message API's 429s, not dead-lettered).
	QuotaRejected map[string]int64 `json:"quota_rejected"`
}
