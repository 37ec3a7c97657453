package config

import (
	"os"
	"regexp"
	"testing"
)

// TestConfigurationReference: docs/configuration.md holds the table that `go run
// ./cmd/configref` writes from the struct tags, so a variable added, renamed, given
// another default or described otherwise shows there.
func TestConfigurationReference(t *testing.T) {
	b, err := os.ReadFile("../" + ReferencePage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	want, err := UpdateReference(page)
	if err != nil {
		t.Fatal(err)
	}
	if want != page {
		t.Fatalf("%s is stale (the config struct tags changed): regenerate it with `go run ./cmd/configref` (or `go generate ./config/`) and commit it", ReferencePage)
	}
}

// TestConfigurationReferenceNames: every BRIDGE_* name the page's hand-written notes use is
// a variable of the bridge (a renamed variable would leave a note about nothing).
func TestConfigurationReferenceNames(t *testing.T) {
	b, err := os.ReadFile("../" + ReferencePage)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, v := range Variables() {
		known[v.Name] = true
	}
	for _, name := range regexp.MustCompile(`BRIDGE_[A-Z0-9_]*[A-Z0-9]`).FindAllString(string(b), -1) {
		if !known[name] && name != "BRIDGE_PORT" { // BRIDGE_PORT: the Kubernetes example below
			t.Errorf("%s names %s, which is not a variable of the bridge", ReferencePage, name)
		}
	}
}

func TestMarkdownText(t *testing.T) {
	got := markdownText(`<glob>=<n>/s (orders.*=1/s | x) BRIDGE_NATS_ACK_WAIT + 1m`)
	want := "&lt;glob&gt;=&lt;n&gt;/s (orders.\\*=1/s \\| x) `BRIDGE_NATS_ACK_WAIT` + 1m"
	if got != want {
		t.Fatalf("markdownText: %q, want %q", got, want)
	}
}
