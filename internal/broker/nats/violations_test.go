package nats

import (
	"errors"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

func TestViolationsRecordPublishOnly(t *testing.T) {
	v := newViolations()
	start := time.Now()
	v.record(fmt.Errorf("%w: %s", natsgo.ErrPermissionViolation, `Permissions Violation for Subscription to "a.b"`))
	v.record(errors.New(`Permissions Violation for Publish to "a.b"`)) // not a nats violation
	if hit, _ := v.since("a.b", start); hit {
		t.Fatal("a subscribe violation or a foreign error counted as a publish violation")
	}
	v.record(fmt.Errorf("%w: %s", natsgo.ErrPermissionViolation, `Permissions Violation for Publish to "a.b"`))
	if hit, _ := v.since("a.b", start); !hit {
		t.Fatal("publish violation not recorded")
	}
	if hit, _ := v.since("a.b", time.Now().Add(time.Second)); hit {
		t.Fatal("a violation before the publish began counted")
	}
	if hit, _ := v.since("a.c", start); hit {
		t.Fatal("violation of another subject counted")
	}
}
