package broker

import (
	"errors"
	"fmt"
)

// Reasons of a [RejectedError]; they become the dead-letter reason (x-delay-error).
const (
	// ReasonForbidden: the broker refused the publish for lack of permission (a NATS
	// permissions violation, Kafka TOPIC_AUTHORIZATION_FAILED).
	ReasonForbidden = "forbidden"
	// ReasonTooLarge: the message exceeds what the broker accepts (NATS max_payload,
	// Kafka MESSAGE_TOO_LARGE).
	ReasonTooLarge = "too_large"
)

// RejectedError is a permanent rejection of one message by the target broker: trying
// again cannot succeed, so egress dead-letters the message after this one attempt
// instead of retrying it. Any other publish error is treated as transient.
type RejectedError struct {
	// Reason is ReasonForbidden or ReasonTooLarge.
	Reason string
	// Err is the broker's error.
	Err error
}

// Reject wraps err as a permanent rejection for reason.
func Reject(reason string, err error) *RejectedError {
	return &RejectedError{Reason: reason, Err: err}
}

func (e *RejectedError) Error() string { return fmt.Sprintf("rejected (%s): %v", e.Reason, e.Err) }

// Unwrap returns the broker's error.
func (e *RejectedError) Unwrap() error { return e.Err }

// RejectReason returns Reason; egress recognises a rejection by this method.
func (e *RejectedError) RejectReason() string { return e.Reason }

// IsRejected reports whether err is or wraps a [RejectedError], and its reason.
func IsRejected(err error) (string, bool) {
	var r *RejectedError
	if errors.As(err, &r) {
		return r.Reason, true
	}
	return "", false
}
