package api

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/admin"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/internal/fleetstats"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// GET /v1/overview?scope=fleet sums what two replicas added (not only this replica's
// counters, which stay behind scope=replica and the default): each window's total and
// the bucket its counts fell in, the lateness quantiles from the summed buckets, dead
// letters by reason, the live replicas; an hour-old minute is in the 7 days, not the hour.
func TestFleetOverview(t *testing.T) {
	rdb := testredis.Client(t)
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r1", "r2"} {
		m, err := st.Heartbeat(ctx, id, time.Minute, 0, "")
		if err == nil {
			_, err = st.Heartbeat(ctx, id, time.Minute, 0, m.Token)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Truncate(time.Minute).Add(30 * time.Second)
	adm := adminOf(t, st)
	add := func(at time.Time, fields map[string]int64) {
		t.Helper()
		if err := adm.AddStats(ctx, at, fields); err != nil {
			t.Fatal(err)
		}
	}
	add(now, map[string]int64{"in:parked": 10, "out:published": 100, "late:0.01": 100, "dead:invalid_delay": 1})             // replica 1
	add(now.Add(-time.Second), map[string]int64{"in:parked": 5, "out:published": 100, "late:0.1": 100, "dead:too_large": 2}) // replica 2
	add(now.Add(-2*time.Hour), map[string]int64{"in:parked": 1000})                                                          // before the hour

	// This replica's own counters say something else: the fleet view does not read them.
	reg := prometheus.NewRegistry()
	own := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "delaybridge_messages_in_total"}, []string{"broker", "result", "reason"})
	reg.MustRegister(own)
	own.WithLabelValues("nats", "parked", "").Add(3)
	srv := serveAPI(t, New(Config{Gatherer: reg, Now: func() time.Time { return now }}, st, adm, nil))

	var ov httpapi.FleetOverviewResponse
	get(t, srv.Client, srv.URL+"/v1/overview?scope=fleet", http.StatusOK, &ov)
	h, w := ov.LastHour, ov.Last7d
	if ov.Scope != "fleet" || ov.Replicas != 2 || ov.Now != now.UnixMilli() || ov.Redis != "ok" {
		t.Fatalf("overview %+v", ov)
	}
	if len(h.Series) != 60 || h.Step != 60_000 || h.From != now.Truncate(time.Minute).Add(-59*time.Minute).UnixMilli() ||
		len(w.Series) != 168 || w.Step != 3_600_000 || w.From != now.Truncate(time.Hour).Add(-167*time.Hour).UnixMilli() {
		t.Fatalf("windows: hour %d buckets of %d from %d, 7d %d of %d from %d", len(h.Series), h.Step, h.From, len(w.Series), w.Step, w.From)
	}
	last := h.Series[59]
	if h.Total.In["parked"] != 15 || last.In["parked"] != 15 || h.Total.Out["published"] != 200 || last.At != now.Truncate(time.Minute).UnixMilli() ||
		h.Total.DeadLettered["invalid_delay"] != 1 || h.Total.DeadLettered["too_large"] != 2 || h.Total.Delivered != 200 {
		t.Fatalf("last hour total %+v, last minute %+v", h.Total, last)
	}
	if p50, p99 := h.Total.LatenessP50, h.Total.LatenessP99; p50 == nil || p99 == nil || math.Abs(*p50-10) > 0.01 || math.Abs(*p99-98.2) > 0.01 {
		t.Fatalf("fleet lateness p50 %v p99 %v, want 10 and 98.2 ms from the summed buckets", p50, p99)
	}
	if h.Series[0].In["parked"] != 0 || h.Series[0].LatenessP50 != nil {
		t.Fatalf("first minute %+v, want empty", h.Series[0])
	}
	if w.Total.In["parked"] != 1015 || w.Series[167].In["parked"]+w.Series[165].In["parked"] != 1015 {
		t.Fatalf("7 days total %v, last hours %v %v", w.Total.In, w.Series[165].In, w.Series[167].In)
	}

	var rep httpapi.OverviewResponse
	get(t, srv.Client, srv.URL+"/v1/overview", http.StatusOK, &rep)
	if rep.Scope != "replica" || rep.In["parked"] != 3 {
		t.Fatalf("default overview %+v, want this replica's", rep)
	}
	get(t, srv.Client, srv.URL+"/v1/overview?scope=replica", http.StatusOK, &rep)
	if rep.Scope != "replica" || rep.In["parked"] != 3 {
		t.Fatalf("replica overview %+v", rep)
	}
	for _, q := range []string{"scope=FLEET", "scope=fleet&scope=fleet", "scope=", "x=1", "scope=fleet&x=1", "scope=%00"} {
		get(t, srv.Client, srv.URL+"/v1/overview?"+q, http.StatusBadRequest, nil)
	}
}

// get GETs url, wants status, and decodes the body into v (when not nil).
func get(t *testing.T, c *http.Client, url string, status int, v any) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, body, status)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, body)
		}
	}
}

var _ Admin = (*admin.Admin)(nil)
var _ fleetstats.Store = (*admin.Admin)(nil)
