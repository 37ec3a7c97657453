package broker

import (
	"fmt"
	"maps"
)

// PublishError reports the messages of one Publish call that were not confirmed; the
// others of the call were. The egress package recognises it by its FailedMessages method.
// Not safe for concurrent use while it is being filled.
type PublishError struct {
	// Topic is the subject or topic of the Publish call.
	Topic string
	// Total is the number of messages of the call.
	Total int

	failed map[string]error
	order  []string
}

// NewPublishError returns an empty PublishError for a call of total messages to topic.
func NewPublishError(topic string, total int) *PublishError {
	return &PublishError{Topic: topic, Total: total, failed: map[string]error{}}
}

// Add records that the message with this UUID failed with err.
func (e *PublishError) Add(uuid string, err error) {
	if _, ok := e.failed[uuid]; !ok {
		e.order = append(e.order, uuid)
	}
	e.failed[uuid] = err
}

// Failed reports whether the message with this UUID was recorded as failed.
func (e *PublishError) Failed(uuid string) bool {
	_, ok := e.failed[uuid]
	return ok
}

// Len is the number of failed messages.
func (e *PublishError) Len() int { return len(e.order) }

// FailedMessages returns the cause per failed message, keyed by message UUID. The map
// is a copy.
func (e *PublishError) FailedMessages() map[string]error {
	return maps.Clone(e.failed)
}

// Error summarises the failures, naming the first.
func (e *PublishError) Error() string {
	if len(e.order) == 0 {
		return fmt.Sprintf("publish to %s: no message failed", e.Topic)
	}
	first := e.order[0]
	return fmt.Sprintf("publish to %s: %d of %d messages not confirmed (first %s: %v)",
		e.Topic, len(e.order), e.Total, first, e.failed[first])
}

// Unwrap returns the causes, in message order, for errors.Is and errors.As.
func (e *PublishError) Unwrap() []error {
	errs := make([]error, 0, len(e.order))
	for _, id := range e.order {
		errs = append(errs, e.failed[id])
	}
	return errs
}
