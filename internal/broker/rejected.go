package broker

import (
	"errors"
	"fmt"
)

// RejectedError is a permanent rejection of one message by the target broker: trying
// again cannot succeed, so egress dead-letters the message after this one attempt
// instead of retrying it. Any other publish error is treated as transient.
type RejectedError struct {
	// Reason is contract.ReasonForbidden or contract.ReasonTooLarge.
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
