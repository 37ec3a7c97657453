package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// startReplicas starts n replicas of the built bridge on s (one Redis, one NATS).
func startReplicas(t *testing.T, s *stack, n int) []*bridge {
	t.Helper()
	bs := make([]*bridge, n)
	for i := range bs {
		bs[i] = startBridge(t, maps.Clone(s.env))
	}
	return bs
}

// getJSON GETs url and decodes its 200 body into v; false on any other answer.
func getJSON(url string, v any) bool {
	code, body := httpGet(url)
	return code == 200 && json.Unmarshal([]byte(body), v) == nil
}

// TestFleetOverviewSumsReplicas: three replicas of the built binary on one Redis and NATS,
// 20 messages sent through each one's API and 2 invalid ones through NATS (dead-lettered:
// missing_target), delivered by whichever replica owns their shard. GET
// /v1/overview?scope=fleet of every replica answers the fleet's sums (each replica adds
// its counts every 5 s): 60 parked and 60 published in the last hour's total, its last
// minutes and the last 7 days, the dead letters by reason, 60 lateness observations with
// quantiles, 3 live replicas; and they are the sums of the replicas' own (scope=replica)
// counters, of which none holds them all.
func TestFleetOverviewSumsReplicas(t *testing.T) {
	s := newStack(t)
	bs := startReplicas(t, s, 3)
	out := subscribe(t, s.nc, s.name("fleet.out"))
	payload := "x"
	for i, b := range bs {
		c := &client.Client{Base: "http://" + b.APIAddr}
		for j := range 20 {
			if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: fmt.Sprintf("f%d-%d", i, j), Target: s.name("fleet.out"),
				Delay: []byte(`"500ms"`), Payload: &payload}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 2 {
		hdr := nats.Header{}
		hdr.Set("x-delay", "1s") // no x-target
		if reply := request(t, s.nc, s.name("delay.in"), hdr, "lost"); reply["error"] == nil {
			t.Fatalf("reply %v, want an error", reply)
		}
	}
	for range 60 {
		receive(t, out, 20*time.Second)
	}

	var ov httpapi.FleetOverviewResponse
	done := func(ov httpapi.FleetOverviewResponse) bool {
		h := ov.LastHour.Total
		return h.In["parked"] == 60 && h.Out["published"] == 60 && h.DeadLettered["missing_target"] == 2
	}
	deadline := time.Now().Add(30 * time.Second)
	for !getJSON("http://"+bs[0].APIAddr+"/v1/overview?scope=fleet", &ov) || !done(ov) {
		if time.Now().After(deadline) {
			t.Fatalf("fleet overview after 30 s: %+v", ov.LastHour.Total)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for i, b := range bs {
		var o httpapi.FleetOverviewResponse
		if !getJSON("http://"+b.APIAddr+"/v1/overview?scope=fleet", &o) {
			t.Fatalf("replica %d: no fleet overview", i)
		}
		h, w := o.LastHour.Total, o.Last7d.Total
		recent := 0
		for _, m := range o.LastHour.Series[57:] {
			recent += int(m.In["parked"])
		}
		if !done(o) || o.Replicas != 3 || h.Delivered != 60 || h.LatenessP50 == nil || h.LatenessP99 == nil ||
			w.In["parked"] != 60 || w.Out["published"] != 60 || w.DeadLettered["missing_target"] != 2 || recent != 60 {
			t.Fatalf("replica %d's fleet overview: %d replicas, last hour %+v, 7 days %+v, last 3 minutes %d parked", i, o.Replicas, h, w, recent)
		}
	}
	parked, published, dead := 0.0, 0.0, 0.0
	for i, b := range bs {
		var r httpapi.OverviewResponse
		if !getJSON("http://"+b.APIAddr+"/v1/overview?scope=replica", &r) || r.Scope != "replica" {
			t.Fatalf("replica %d: no replica overview", i)
		}
		if r.In["parked"] != 20 {
			t.Fatalf("replica %d's own counters %v: want its 20 parked", i, r.In)
		}
		parked, published, dead = parked+r.In["parked"], published+r.Out["published"], dead+r.DeadLettered
	}
	if parked != 60 || published != 60 || dead != 2 {
		t.Fatalf("the replicas' own counters sum to %v parked, %v published, %v dead-lettered", parked, published, dead)
	}
	t.Logf("fleet overview of 3 replicas: %+v", ov.LastHour.Total)
}

// TestFleetOverviewAfterKill: replica A's counts stay in the fleet's buckets after A is
// killed with -9 (what it had added: 10 parked), the survivor's are added to them, and
// the live replicas drop to 1 once A's membership ran out (BRIDGE_OWNERSHIP_TTL 3 s).
func TestFleetOverviewAfterKill(t *testing.T) {
	s := newStack(t)
	bs := startReplicas(t, s, 2)
	a, b := bs[0], bs[1]
	payload := "x"
	send := func(br *bridge, prefix string, n int) {
		c := &client.Client{Base: "http://" + br.APIAddr}
		for j := range n {
			if _, err := c.Send(t.Context(), httpapi.PostRequest{ID: fmt.Sprintf("%s-%d", prefix, j), Target: s.name("fleet.kill"),
				Delay: []byte(`"1h"`), Payload: &payload}); err != nil {
				t.Fatal(err)
			}
		}
	}
	await := func(what string, url string, ok func(httpapi.FleetOverviewResponse) bool) httpapi.FleetOverviewResponse {
		t.Helper()
		var ov httpapi.FleetOverviewResponse
		deadline := time.Now().Add(30 * time.Second)
		for !getJSON(url, &ov) || !ok(ov) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: after 30 s: %d replicas, %+v", what, ov.Replicas, ov.LastHour.Total.In)
			}
			time.Sleep(300 * time.Millisecond)
		}
		return ov
	}
	fleetB := "http://" + b.APIAddr + "/v1/overview?scope=fleet"
	send(a, "a", 10)
	await("A's counts", fleetB, func(ov httpapi.FleetOverviewResponse) bool {
		return ov.LastHour.Total.In["parked"] == 10 && ov.Replicas == 2
	})
	if err := a.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	send(b, "b", 5)
	ov := await("after the kill", fleetB, func(ov httpapi.FleetOverviewResponse) bool {
		return ov.LastHour.Total.In["parked"] == 15 && ov.Replicas == 1
	})
	if ov.Last7d.Total.In["parked"] != 15 {
		t.Fatalf("7 days after the kill: %+v", ov.Last7d.Total.In)
	}
}
