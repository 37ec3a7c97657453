// Package ingress takes messages from watermill subscribers (the bridge's ingress and
// cancel subjects on each broker), checks each one once at the edge with
// ingress/intake's Rules.Prepare, parks valid messages in the delay store in batches
// (group commit by lane), and only then acknowledges the source.
//
// Every message ends in exactly one of: acked after it was parked (or cancelled), acked
// after it was dead-lettered on its source broker (invalid input), or nacked for
// redelivery (store unavailable at shutdown). Ingress imports no broker package; it sees
// brokers as message.Subscriber / message.Publisher (with ReceivedSubscriber, its own
// interface, as the fast path of a subscriber that has one) and the store as a Parker.
package ingress
