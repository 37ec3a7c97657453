package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestRedisTopology(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Redis
	}{
		{"default URL", nil, Redis{URL: "redis://127.0.0.1:6379/0"}},
		{"sentinel wins over the default URL",
			map[string]string{"BRIDGE_REDIS_SENTINEL_ADDRS": " s1:26379, ,s2:26379", "BRIDGE_REDIS_SENTINEL_MASTER": "mymaster"},
			Redis{SentinelAddrs: []string{"s1:26379", "s2:26379"}, SentinelMaster: "mymaster"}},
		{"credentials with a cluster",
			map[string]string{"BRIDGE_REDIS_CLUSTER_ADDRS": "r1:7000", "BRIDGE_REDIS_USERNAME": "app", "BRIDGE_REDIS_PASSWORD": "pw"},
			Redis{ClusterAddrs: []string{"r1:7000"}, Username: "app", Password: "pw"}},
		{"credentials with a URL are allowed",
			map[string]string{"BRIDGE_REDIS_URL": "redis://u:x@h:1/0", "BRIDGE_REDIS_PASSWORD": "pw"},
			Redis{URL: "redis://u:x@h:1/0", Password: "pw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustLoad(t, tt.env).Redis; !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Redis = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRedisTopologyProblems(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want []string
		text string
	}{
		{map[string]string{"BRIDGE_REDIS_SENTINEL_ADDRS": "s1:26379"}, []string{"BRIDGE_REDIS_SENTINEL_MASTER"}, "required"},
		{map[string]string{"BRIDGE_REDIS_SENTINEL_MASTER": "m"}, []string{"BRIDGE_REDIS_SENTINEL_MASTER"}, "SENTINEL_ADDRS is empty"},
		{map[string]string{"BRIDGE_REDIS_SENTINEL_ADDRS": "s1", "BRIDGE_REDIS_SENTINEL_MASTER": "m"}, []string{"BRIDGE_REDIS_SENTINEL_ADDRS"}, "host:port"},
		{map[string]string{"BRIDGE_REDIS_SENTINEL_ADDRS": "s1:1", "BRIDGE_REDIS_SENTINEL_MASTER": "m", "BRIDGE_REDIS_URL": "redis://h:1/0"},
			[]string{"BRIDGE_REDIS_URL"}, "set only one"},
		{map[string]string{"BRIDGE_REDIS_SENTINEL_ADDRS": "s1:1", "BRIDGE_REDIS_SENTINEL_MASTER": "m", "BRIDGE_REDIS_CLUSTER_ADDRS": "r1:1"},
			[]string{"BRIDGE_REDIS_CLUSTER_ADDRS"}, "set only one"},
		{map[string]string{"BRIDGE_REDIS_USERNAME": "a b"}, []string{"BRIDGE_REDIS_USERNAME"}, "whitespace"},
		{map[string]string{"BRIDGE_REDIS_PASSWORD": "secret\n"}, []string{"BRIDGE_REDIS_PASSWORD"}, "line break"},
	}
	for _, tt := range tests {
		_, err := Load(tt.env)
		if got := problems(t, err); !reflect.DeepEqual(got, tt.want) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("Load(%v) = %v, want problems %v mentioning %q", tt.env, err, tt.want, tt.text)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("password echoed: %v", err)
		}
	}
}

func TestRedisPasswordRedacted(t *testing.T) {
	r := mustLoad(t, map[string]string{"BRIDGE_REDIS_PASSWORD": "hunter2"}).Redacted()
	if r["BRIDGE_REDIS_PASSWORD"] != "[redacted]" {
		t.Fatalf("password shown as %q", r["BRIDGE_REDIS_PASSWORD"])
	}
}
