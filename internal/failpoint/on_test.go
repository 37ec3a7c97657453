//go:build failpoints

package failpoint

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	ps, err := parse("after-park=crash, after-publish=crash@3")
	if err != nil {
		t.Fatal(err)
	}
	if ps[AfterPark].at != 1 || ps[AfterPublish].at != 3 || ps[AfterClaim] != nil {
		t.Fatalf("parsed %+v", ps)
	}
	for _, bad := range []string{"after-park", "nope=crash", "after-park=hang", "after-park=crash@0", "after-park=crash@x"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}

func TestParseOffset(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "-30s": -30 * time.Second, " 1m ": time.Minute} {
		if got, err := parseOffset(in); err != nil || got != want {
			t.Errorf("parseOffset(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseOffset("30"); err == nil {
		t.Error("parseOffset(\"30\"): no error")
	}
}
