// Package headers is the ordered, repeatable header list that delaybridge carries from a
// source message to its target, and its lossless mapping onto watermill's
// message.Metadata (a map, which cannot hold a repeated header on its own). [Message] is an
// outgoing message as a header list, for a publisher that takes one without that mapping.
//
// Keys starting with [ReservedPrefix] are the bridge's internal metadata: adapters never
// put them on the wire. A producer's header with such a name is read into the list as any
// other (intake refuses it, so that it is never dropped silently), and [ToMetadata] keeps
// it inside [MetaHeaders], never as a plain metadata key: it cannot pass for the adapter's
// own metadata.
package headers
