package kafka

// Hooks observe a Subscriber's partition consumers (tests only). Each is called from a
// partition's goroutine and must not block.
type Hooks struct {
	// Resolved follows the processing of an Ack or Nack.
	Resolved func(topic string, partition int, offset int64, acked bool)
	// Committed follows every offset commit attempt.
	Committed func(topic string, partition int, offset int64, err error)
}

// SetHooks installs h on s; call it before the first Subscribe.
func SetHooks(s *Subscriber, h Hooks) {
	s.hooks = hooks{resolved: h.Resolved, committed: h.Committed}
}
