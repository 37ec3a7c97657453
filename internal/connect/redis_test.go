package connect

import (
	"testing"
	"time"
)

func TestRedisOptions(t *testing.T) {
	// What config.Load makes of BRIDGE_REDIS_* (config's TestRedisConnect checks the
	// mapping).
	o := redisOptions(Redis{
		URL:      "rediss://u:urlpw@h:6380/3?dial_timeout=3s",
		Password: "pw",
	})
	if o.Addrs[0] != "h:6380" || o.DB != 3 || o.TLSConfig == nil || o.DialTimeout != 3*time.Second ||
		o.Username != "u" || o.Password != "pw" || o.IsClusterMode || o.MasterName != "" {
		t.Errorf("standalone: %+v", o)
	}

	o = redisOptions(Redis{
		ClusterAddrs: []string{"r1:7000", "r2:7001"},
		Username:     "app",
		Password:     "pw",
	})
	if !o.IsClusterMode || len(o.Addrs) != 2 || o.MaxRedirects < 3 || o.Username != "app" || o.Password != "pw" {
		t.Errorf("cluster: %+v", o)
	}

	o = redisOptions(Redis{
		SentinelAddrs:  []string{"s1:26379", "s2:26379"},
		SentinelMaster: "mymaster",
		Password:       "pw",
	})
	if o.MasterName != "mymaster" || len(o.Addrs) != 2 || o.IsClusterMode || o.Password != "pw" {
		t.Errorf("sentinel: %+v", o)
	}
}
