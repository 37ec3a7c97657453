package config

import (
	"reflect"
	"testing"

	"github.com/delaybridge/delaybridge/internal/connect"
)

// TestRedisConnect: every BRIDGE_REDIS_* setting reaches internal/connect's Redis.
func TestRedisConnect(t *testing.T) {
	c, err := Load(map[string]string{
		"BRIDGE_REDIS_SENTINEL_ADDRS":  "s1:26379, s2:26379",
		"BRIDGE_REDIS_SENTINEL_MASTER": "mymaster",
		"BRIDGE_REDIS_USERNAME":        "app",
		"BRIDGE_REDIS_PASSWORD":        "pw",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := connect.Redis{SentinelAddrs: []string{"s1:26379", "s2:26379"}, SentinelMaster: "mymaster", Username: "app", Password: "pw"}
	if got := c.Redis.Connect(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	full := Redis{URL: "redis://h:1/2", ClusterAddrs: []string{"c:1"}, SentinelAddrs: []string{"s:1"}, SentinelMaster: "m",
		Username: "u", Password: "p", PasswordFile: "/f", TLSCAFile: "ca", TLSCertFile: "cert", TLSKeyFile: "key"}
	got := reflect.ValueOf(full.Connect())
	for i := range got.NumField() {
		if got.Field(i).IsZero() {
			t.Errorf("connect.Redis.%s not set from config.Redis", got.Type().Field(i).Name)
		}
	}
}
