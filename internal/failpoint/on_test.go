//go:build failpoints

package failpoint

import "testing"

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
