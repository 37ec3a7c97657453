package bridge

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// The fleet-stats publisher gathers a registry that holds ingress's and egress's metrics
// only, none of the collectors that read Redis when gathered (the store gauges, script
// timings): its snapshot every 5 s costs an idle replica no Redis command. Those metrics are
// in the bridge's registry too (/metrics), with the same values.
func TestFleetCountsRegistry(t *testing.T) {
	rdb := testredis.Client(t)
	store, err := delaystore.New(rdb, delaystore.Config{KeyPrefix: testredis.Prefix(t), Shards: 4, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := newWatch(rdb, store, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	b.inMetrics.Count("nats", "parked", 3)
	before := rdb.Info(t.Context(), "stats").Val()
	mfs, err := b.countsReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if after := rdb.Info(t.Context(), "stats").Val(); commands(after)-commands(before) != 1 { // the INFO itself
		t.Errorf("gathering the counts registry sent %d Redis commands", commands(after)-commands(before)-1)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if !strings.HasPrefix(mf.GetName(), "delaybridge_") || strings.Contains(mf.GetName(), "redis") || strings.Contains(mf.GetName(), "store") {
			t.Errorf("counts registry holds %s", mf.GetName())
		}
	}
	if !names["delaybridge_messages_in_total"] || !names["delaybridge_messages_out_total"] && !names["delaybridge_delivery_lateness_seconds"] {
		t.Errorf("counts registry lacks ingress's or egress's metrics: %v", names)
	}
	all, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range all {
		if mf.GetName() == "delaybridge_messages_in_total" && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetCounter().GetValue() == 3 {
			found = true
		}
	}
	if !found {
		t.Error("the bridge's registry lacks delaybridge_messages_in_total = 3")
	}
}

// commands is total_commands_processed of an INFO stats answer.
func commands(info string) int {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n := 0
			for _, c := range v {
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return -1
}
