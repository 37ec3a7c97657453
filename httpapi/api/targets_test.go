package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/delaystore/storetest"
	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
	"github.com/delaybridge/delaybridge/internal/testproxy"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestTargetsNextDueOnSlowRedis: on a 1,500-message store behind 30 ms of network latency,
// GET /v1/targets finds the next due of every target, the rare one parked after all of
// the common one's messages too: the look-up is bounded by the entries it reads, not cut
// after 100 ms (issue 23, item 13).
func TestTargetsNextDueOnSlowRedis(t *testing.T) {
	srv := testredis.Start(t)
	proxy := testproxy.Start(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 16, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Init(ctx); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(time.Hour).UnixMilli()
	var reqs []delaystore.ParkRequest
	park := func(id, target string, at int64) {
		reqs = append(reqs, delaystore.ParkRequest{ID: id, Absolute: true, At: at,
			Envelope: delaystore.Envelope{Target: target, Source: "http", Payload: []byte("x")}})
	}
	for i := range 1499 {
		park(fmt.Sprintf("c%d", i), "nats:common", base+int64(i))
	}
	park("r", "nats:rare", base+10_000)
	if _, err := st.Park(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	proxy.AddToxic(t, testproxy.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 30}})
	c := newAPIOn(t, "", st)
	res, err := c.Targets(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"nats:common": base, "nats:rare": base + 10_000}
	if len(res.Targets) != 2 {
		t.Fatalf("targets %+v", res.Targets)
	}
	for _, tg := range res.Targets {
		if tg.NextDue == nil || *tg.NextDue != want[tg.Target] {
			t.Errorf("%s: next_due %v, want %d", tg.Target, tg.NextDue, want[tg.Target])
		}
	}
}

// TestQuotaAPI: a POST over its target's BRIDGE_TARGET_QUOTA is answered 429
// quota_exceeded and parks nothing; a DELETE frees the place at once; GET /v1/targets
// shows the quota's use, and per target its quota pattern and its next message's window.
func TestQuotaAPI(t *testing.T) {
	st := storetest.NewWith(t, delaystore.Config{Lease: time.Second, TargetQuota: "tenant-a.*=2"})
	c := newAPIOn(t, "", st)
	ctx := context.Background()
	sendTo := func(id, target, delay, window string) error {
		req := httpapi.PostRequest{Target: target, Delay: []byte(`"` + delay + `"`), ID: id, Payload: str("x")}
		if window != "" {
			req.Window = []byte(`"` + window + `"`)
		}
		_, err := c.Send(ctx, req)
		return err
	}
	send := func(id string) error { return sendTo(id, "tenant-a.orders", "2h", "") }
	if err := sendTo("a", "tenant-a.orders", "1h", "30s"); err != nil {
		t.Fatal(err)
	}
	if err := send("b"); err != nil {
		t.Fatal(err)
	}
	if err := sendTo("free", "other", "1h", "1s"); err != nil {
		t.Fatal(err)
	}
	if err := sendTo("free-2", "other", "30m", ""); err != nil {
		t.Fatal(err)
	}
	var apiErr *client.APIError
	if err := send("c"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests || !strings.HasPrefix(apiErr.Message, contract.ReasonQuotaExceeded+":") {
		t.Fatalf("third POST: %v, want 429 quota_exceeded", err)
	}
	if _, err := c.Get(ctx, "c"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("the refused message is parked: %v", err)
	}
	ts, err := c.Targets(ctx, false)
	if err != nil || len(ts.Quotas) != 1 || ts.Quotas[0] != (httpapi.QuotaResponse{Pattern: "tenant-a.*", Limit: 2, Parked: 2, Rejected: 1}) {
		t.Fatalf("targets: %+v %v", ts.Quotas, err)
	}
	want := []httpapi.TargetResponse{{Target: "nats:other", Parked: 2}, {Target: "nats:tenant-a.orders", Parked: 2, Window: 30_000, Quota: "tenant-a.*"}}
	for i, w := range want {
		if i >= len(ts.Targets) || ts.Targets[i].NextDue == nil {
			t.Fatalf("targets: %+v, want %+v", ts.Targets, want)
		}
		w.NextDue = ts.Targets[i].NextDue
		if ts.Targets[i] != w {
			t.Errorf("target %d: %+v, want %+v", i, ts.Targets[i], w)
		}
	}
	if ok, err := c.Cancel(ctx, "a"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := send("c"); err != nil {
		t.Fatalf("POST after a DELETE freed a place: %v", err)
	}
}
