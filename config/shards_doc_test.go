package config

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/delaystore"
)

// TestReadmeShardsBound: the README states the BRIDGE_SHARDS bound that validation
// enforces (delaystore.MaxShards), wherever it states one.
func TestReadmeShardsBound(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	found := regexp.MustCompile("`BRIDGE_SHARDS` \\(up to ([0-9,]+)").FindAllStringSubmatch(string(readme), -1)
	if len(found) == 0 {
		t.Fatal("the README states no BRIDGE_SHARDS bound")
	}
	for _, m := range found {
		if n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", "")); n != delaystore.MaxShards {
			t.Errorf("README: %q, validation takes up to %d", m[0], delaystore.MaxShards)
		}
	}
}
