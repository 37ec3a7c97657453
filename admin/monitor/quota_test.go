package monitor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
)

// TestQuotaCollector: the quota gauges follow the store's counts (fleet-wide parked, the
// limit) and the rejections of this replica's parks.
func TestQuotaCollector(t *testing.T) {
	st := storetest.NewWith(t, delaystore.Config{Lease: time.Second, TargetQuota: "tenant-a.*=3,tenant-b.*=10"})
	var reqs []delaystore.ParkRequest
	for i := range 5 {
		reqs = append(reqs, delaystore.ParkRequest{ID: fmt.Sprint("m", i), Delay: time.Hour,
			Envelope: delaystore.Envelope{Target: "nats:tenant-a.x", Source: "http", Payload: []byte("x")}})
	}
	if _, err := st.Park(t.Context(), reqs); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewQuotaCollector(st, admin.New(st)))
	want := `
# HELP delaybridge_quota_limit The BRIDGE_TARGET_QUOTA limit of a pattern, as this replica is configured.
# TYPE delaybridge_quota_limit gauge
delaybridge_quota_limit{pattern="tenant-a.*"} 3
delaybridge_quota_limit{pattern="tenant-b.*"} 10
# HELP delaybridge_quota_parked Parked messages counted against a BRIDGE_TARGET_QUOTA pattern, fleet-wide (every replica reports the same count).
# TYPE delaybridge_quota_parked gauge
delaybridge_quota_parked{pattern="tenant-a.*"} 3
delaybridge_quota_parked{pattern="tenant-b.*"} 0
# HELP delaybridge_quota_rejected_total Messages this replica did not park because their BRIDGE_TARGET_QUOTA pattern was full (dead-lettered quota_exceeded, or API 429).
# TYPE delaybridge_quota_rejected_total counter
delaybridge_quota_rejected_total{pattern="tenant-a.*"} 2
delaybridge_quota_rejected_total{pattern="tenant-b.*"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
