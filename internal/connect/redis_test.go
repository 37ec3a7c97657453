package connect

import (
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/config"
)

func TestRedisOptions(t *testing.T) {
	load := func(env map[string]string) config.Redis {
		t.Helper()
		c, err := config.Load(env)
		if err != nil {
			t.Fatal(err)
		}
		return c.Redis
	}

	o := redisOptions(load(map[string]string{
		"BRIDGE_REDIS_URL":      "rediss://u:urlpw@h:6380/3?dial_timeout=3s",
		"BRIDGE_REDIS_PASSWORD": "pw",
	}))
	if o.Addrs[0] != "h:6380" || o.DB != 3 || o.TLSConfig == nil || o.DialTimeout != 3*time.Second ||
		o.Username != "u" || o.Password != "pw" || o.IsClusterMode || o.MasterName != "" {
		t.Errorf("standalone: %+v", o)
	}

	o = redisOptions(load(map[string]string{
		"BRIDGE_REDIS_CLUSTER_ADDRS": "r1:7000,r2:7001",
		"BRIDGE_REDIS_USERNAME":      "app",
		"BRIDGE_REDIS_PASSWORD":      "pw",
	}))
	if !o.IsClusterMode || len(o.Addrs) != 2 || o.MaxRedirects < 3 || o.Username != "app" || o.Password != "pw" {
		t.Errorf("cluster: %+v", o)
	}

	o = redisOptions(load(map[string]string{
		"BRIDGE_REDIS_SENTINEL_ADDRS":  "s1:26379,s2:26379",
		"BRIDGE_REDIS_SENTINEL_MASTER": "mymaster",
		"BRIDGE_REDIS_PASSWORD":        "pw",
	}))
	if o.MasterName != "mymaster" || len(o.Addrs) != 2 || o.IsClusterMode || o.Password != "pw" {
		t.Errorf("sentinel: %+v", o)
	}
}
