package backoff

import (
	"context"
	"testing"
	"time"
)

func TestExp(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second}, {10, 5 * time.Minute}, {1000, 5 * time.Minute}} {
		if got := Exp(time.Second, 5*time.Minute, c.n); got != c.want {
			t.Errorf("Exp(1s, 5m, %d) = %s, want %s", c.n, got, c.want)
		}
	}
}

func TestBackoffNextReset(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 300 * time.Millisecond}
	if b.Failing() {
		t.Fatal("failing before any failure")
	}
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	if !b.Failing() {
		t.Fatal("not failing after failures")
	}
	b.Reset()
	if b.Failing() || b.Next() != 100*time.Millisecond {
		t.Fatal("Reset did not start over")
	}
}

func TestSleepCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported a full wait on a cancelled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep reported a cancel")
	}
}
