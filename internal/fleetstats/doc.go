// Package fleetstats keeps the fleet-wide view (docs/design.md, "Fleet-wide view"): every
// replica adds what its own counters counted since its last call to the fleet's minute and
// hour buckets in Redis (Publisher, one script call every few seconds, never per message),
// and GET /v1/overview?scope=fleet sums the buckets back (Decode, Counts).
//
// A bucket is a hash of fields named from the bridge's own fixed set, never from input:
//
//	in:<result>    delaybridge_messages_in_total, summed over brokers and reasons
//	out:<result>   delaybridge_messages_out_total, summed over brokers
//	dead:<reason>  dead letters: ingress's invalid messages from the brokers (by the
//	               x-delay-error code) and egress's delaybridge_dead_letters_out_total
//	late:<le>      the deliveries of delaybridge_delivery_lateness_seconds whose lateness
//	               fell in the bucket of upper bound le (seconds; "+Inf" for the last),
//	               not cumulative, so that buckets add up over replicas and time
package fleetstats
