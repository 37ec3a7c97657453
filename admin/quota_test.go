package admin

import (
	"reflect"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/delaystore"
)

// Quotas lists this replica's patterns in their order, with its limits and refusals, then
// the patterns another replica's configuration counts, by name, with no limit.
func TestQuotas(t *testing.T) {
	f := setup(t, func(c *delaystore.Config) { c.TargetQuota = "b.*=2,a.*=5" })
	req := func(id, target string) delaystore.ParkRequest {
		return delaystore.ParkRequest{ID: id, Delay: time.Hour, Envelope: delaystore.Envelope{Target: target, Source: "http", Payload: []byte("x")}}
	}
	f.park(t, req("b1", "nats:b.x"), req("b2", "nats:b.x"), req("b3", "nats:b.x"), req("a1", "nats:a.x"))
	other, _ := f.open(t, delaystore.Config{KeyPrefix: f.prefix, Shards: 4, Lease: time.Minute, TargetQuota: "b.*=2,a.*=5,z.*=1,c.*=3"})
	if _, err := other.Park(t.Context(), []delaystore.ParkRequest{req("z1", "nats:z.x"), req("c1", "nats:c.x")}); err != nil {
		t.Fatal(err)
	}
	us, err := f.a.Quotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []QuotaUsage{{Pattern: "b.*", Limit: 2, Parked: 2, Rejected: 1}, {Pattern: "a.*", Limit: 5, Parked: 1},
		{Pattern: "c.*", Parked: 1}, {Pattern: "z.*", Parked: 1}}
	if !reflect.DeepEqual(us, want) {
		t.Fatalf("quotas %+v, want %+v", us, want)
	}
}
