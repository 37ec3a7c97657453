package headers

// Received is one incoming message as a header list, for a receiver that takes it without
// the watermill Metadata round trip (ingress's fast path: the NATS adapter's
// SubscribeReceived for JetStream topics). The adapter fills it and settles it through
// Settle; the receiver must call Ack or Nack exactly once.
type Received struct {
	// Message is the message as read: ID is its broker id (NATS: Nats-Msg-Id, "" when it
	// has none; never a header), Headers its headers (NATS: keys in sorted order, a
	// repeated key's values in order, as [FromMetadata] gives them; Kafka: in record
	// order, a null value as Header.Null), a producer's header with the reserved prefix
	// among them (intake refuses it; the fields below, never a header, carry the
	// adapter's metadata), Payload, and for Kafka Key and Tombstone.
	Message
	// SourceID and SourceTime are what [MetaSourceID] and [MetaSourceTime] carry in a
	// watermill message ("" when none).
	SourceID, SourceTime string
	// Request is what [MetaRequest] "1" says: a core request, whose sender waits for the
	// reply that Ack sends.
	Request bool
	// Settle acks or nacks the message at its source; set by whoever made the Received.
	Settle Settler
}

// Settler settles a [Received] with its source. Implementations are safe for concurrent
// use and never block for long (an ack is sent, not awaited).
type Settler interface {
	// Ack acknowledges the message; reply (when not "") is the body of the answer to a
	// core request ([MetaReply] in a watermill message). Once settled, further calls do
	// nothing.
	Ack(reply string)
	// Nack hands the message back for redelivery (JetStream: a Nak; core NATS: nothing).
	Nack()
}

// Ack acknowledges r with reply (see [Settler.Ack]).
func (r *Received) Ack(reply string) { r.Settle.Ack(reply) }

// Nack hands r back to its source for redelivery (see [Settler.Nack]).
func (r *Received) Nack() { r.Settle.Nack() }
