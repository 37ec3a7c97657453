package bridge

import (
	"errors"
	"fmt"

	"github.com/delaybridge/delaybridge/delaystore"
)

// nameVariables words the store's refusals (a Redis master with too few replicas, a shard
// count that differs from the recorded one) with the BRIDGE_* variable that set the value
// (the names belong to package config, not to delaystore); any other error is returned as
// it is. The wrapped sentinel stays
// (errors.Is).
func nameVariables(err error) error {
	var re *delaystore.ReplicaError
	if errors.As(err, &re) && re.Refused != nil {
		return fmt.Errorf("init: %s refuses INFO replication (%v), so its replicas cannot be counted for BRIDGE_REDIS_MIN_REPLICAS=%d "+
			"(allow +info in the ACL): %w", re.Master, re.Refused, re.Required, delaystore.ErrTooFewReplicas)
	}
	if errors.As(err, &re) {
		return fmt.Errorf("init: %s (role %s) has %d connected replicas, fewer than BRIDGE_REDIS_MIN_REPLICAS=%d: "+
			"no write could be confirmed: %w", re.Master, re.Role, re.Connected, re.Required, delaystore.ErrTooFewReplicas)
	}
	var se *delaystore.ShardCountError
	if errors.As(err, &se) {
		return fmt.Errorf("init: redis key %s records %d shards but BRIDGE_SHARDS is %d: %w",
			se.Key, se.Recorded, se.Configured, delaystore.ErrShardMismatch)
	}
	return err
}
