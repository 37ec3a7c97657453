package egress

import (
	"fmt"
	"math"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/delaystore"
)

// expiredError is why a message with x-delay-expires is dead-lettered instead of
// published: at (Redis clock, unix ms) is past its due time + expires. It is a
// [Rejection] with reason "expired", so it takes the dead-letter path of a permanent
// refusal; its text is the x-delay-error detail.
type expiredError struct {
	due     int64
	at      int64
	expires time.Duration
	// last is the publish error of the attempt before, nil when it expired unpublished.
	last error
	// retry: expiry was found before a retry, which would have come after the deadline.
	retry time.Duration
}

func (e *expiredError) Error() string {
	late := time.Duration(e.at-e.due) * time.Millisecond
	s := fmt.Sprintf("due %s, %s late, expires %s", time.UnixMilli(e.due).UTC().Format(time.RFC3339Nano), late, e.expires)
	if e.retry > 0 {
		s += fmt.Sprintf(", next attempt in %s would be after due + expires", e.retry)
	}
	if e.last != nil {
		s += fmt.Sprintf("; last publish error: %v", e.last)
	}
	return s
}

// RejectReason makes expiredError a [Rejection].
func (e *expiredError) RejectReason() string { return contract.ReasonExpired }

// deadline is the last moment (Redis clock, unix ms) at which c may be published, and
// whether it has one (x-delay-expires was given).
func deadline(c delaystore.Claimed) (int64, bool) {
	if c.Envelope.Expires <= 0 {
		return 0, false
	}
	ms := c.Envelope.Expires.Milliseconds()
	if c.Due > math.MaxInt64-ms {
		return math.MaxInt64, true
	}
	return c.Due + ms, true
}

// expiredAt returns the expiry of c if it may no longer be published at now (Redis
// clock, unix ms), else nil: checked when a message is claimed.
func expiredAt(c delaystore.Claimed, now int64) error {
	if dl, ok := deadline(c); ok && now > dl {
		return &expiredError{due: c.Due, at: now, expires: c.Envelope.Expires}
	}
	return nil
}

// expiredBeforeRetry returns the expiry of c if its next attempt, backoff after now,
// would come after its deadline, else nil: checked before a failed message is retried.
// last is the publish error.
func expiredBeforeRetry(c delaystore.Claimed, now int64, backoff time.Duration, last error) error {
	if dl, ok := deadline(c); ok && now+backoff.Milliseconds() > dl {
		return &expiredError{due: c.Due, at: now, expires: c.Envelope.Expires, last: last, retry: backoff}
	}
	return nil
}
