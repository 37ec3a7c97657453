// Package headers is the ordered, repeatable header list that delaybridge carries from a
// source message to its target, and its lossless mapping onto watermill's
// message.Metadata (a map, which cannot hold a repeated header on its own). [Message] is an
// outgoing message as a header list, for a publisher that takes one without that mapping.
//
// Keys starting with [ReservedPrefix] are the bridge's internal metadata: adapters never
// put them on the wire and [FromMetadata] never returns them.
package headers
