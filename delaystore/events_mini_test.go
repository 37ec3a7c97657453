package delaystore

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestEventsMiniredis: the live events' script and channel work on the dev bridge's
// store (miniredis).
func TestEventsMiniredis(t *testing.T) {
	s := miniredisStore(t, miniredis.RunT(t), Config{KeyPrefix: "dev", Shards: 2, Lease: time.Minute})
	if others, err := s.Tails(t.Context(), "a", true, time.Minute); err != nil || others {
		t.Fatalf("a listens: others %v, %v", others, err)
	}
	if others, err := s.Tails(t.Context(), "b", false, time.Minute); err != nil || !others {
		t.Fatalf("b asks: others %v, %v", others, err)
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
