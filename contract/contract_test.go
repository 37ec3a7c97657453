package contract

import (
	"testing"
	"time"
)

func TestRemaining(t *testing.T) {
	received := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		name     string
		delay    time.Duration
		received time.Time
		now      time.Time
		want     time.Duration
	}{
		{"counted from receipt", 30 * time.Second, received, received.Add(2 * time.Second), 28 * time.Second},
		{"at receipt", 30 * time.Second, received, received, 30 * time.Second},
		{"elapsed: due now", time.Second, received, received.Add(5 * time.Second), 0},
		{"zero delay", 0, received, received.Add(time.Second), 0},
		{"no receipt time: received now", 30 * time.Second, time.Time{}, received, 30 * time.Second},
	} {
		if got := Remaining(c.delay, c.received, c.now); got != c.want {
			t.Errorf("%s: Remaining(%s) = %s, want %s", c.name, c.delay, got, c.want)
		}
	}
}
