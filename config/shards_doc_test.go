package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/delaystore"
)

// TestReadmeShardsBound: the README and the docs/ pages (docs/operating.md, "Fleet") state
// the BRIDGE_SHARDS bound that validation enforces (delaystore.MaxShards), wherever they
// state one.
func TestReadmeShardsBound(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"../README.md"}, pages...)
	stated := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("`BRIDGE_SHARDS` \\(up to ([0-9,]+)").FindAllStringSubmatch(string(b), -1) {
			stated++
			if n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", "")); n != delaystore.MaxShards {
				t.Errorf("%s: %q, validation takes up to %d", page, m[0], delaystore.MaxShards)
			}
		}
	}
	if stated == 0 {
		t.Fatal("neither the README nor docs/ states the BRIDGE_SHARDS bound")
	}
}
