package bridge

import (
	"errors"
	"fmt"
	"testing"

	"github.com/delaybridge/delaybridge/delaystore"
)

// TestNameVariables: the store's refusal of a master with too few replicas names the
// BRIDGE_* variable, in the words they had when delaystore wrote them, and keep their sentinels.
func TestNameVariables(t *testing.T) {
	for _, tc := range []struct {
		err      error
		want     string
		sentinel error
	}{
		{fmt.Errorf("run: %w", &delaystore.ReplicaError{Master: "redis h:1", Role: "master", Connected: 1, Required: 2}),
			"init: redis h:1 (role master) has 1 connected replicas, fewer than BRIDGE_REDIS_MIN_REPLICAS=2: no write could be confirmed: " +
				delaystore.ErrTooFewReplicas.Error(), delaystore.ErrTooFewReplicas},
		{&delaystore.ReplicaError{Master: "redis h:1", Required: 1, Refused: errors.New("NOPERM info")},
			"init: redis h:1 refuses INFO replication (NOPERM info), so its replicas cannot be counted for BRIDGE_REDIS_MIN_REPLICAS=1 (allow +info in the ACL): " +
				delaystore.ErrTooFewReplicas.Error(), delaystore.ErrTooFewReplicas},
		{fmt.Errorf("run: %w", &delaystore.ShardCountError{Key: "delay:shards", Recorded: 16, Configured: 8}),
			"init: redis key delay:shards records 16 shards but BRIDGE_SHARDS is 8: " + delaystore.ErrShardMismatch.Error(),
			delaystore.ErrShardMismatch},
	} {
		got := nameVariables(tc.err)
		if got.Error() != tc.want || !errors.Is(got, tc.sentinel) {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	if other := errors.New("x"); nameVariables(other) != other || nameVariables(nil) != nil {
		t.Error("other errors changed")
	}
}
