package delaystore

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestEventsMiniredis: the live events' announcement and channel work on the dev
// bridge's store (miniredis).
func TestEventsMiniredis(t *testing.T) {
	s := miniredisStore(t, miniredis.RunT(t), Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	wakes, err := s.Wakeups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer wakes.Close()
	if err := s.AnnounceTails(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	for w := range wakes.C {
		if w.Shard == WakeTails && w.ID == "a" {
			break
		}
	}
	batches, stop, err := s.SubscribeEvents(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.PublishEvents(t.Context(), []byte(`{"relay":"b","events":[]}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-batches:
		if p != `{"relay":"b","events":[]}` {
			t.Fatalf("got %q", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no batch")
	}
}
