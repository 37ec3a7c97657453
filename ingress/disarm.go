package ingress

import (
	"strings"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// disarmNATSHeaders returns md (watermill metadata of a message bound for the NATS
// dead-letter subject) with every Nats-* header renamed to [contract.HeaderOriginalPrefix] + name,
// value and order kept. A JetStream stream capturing the dead-letter subject acts on those
// headers: it refuses Nats-Schedule (schedules disabled) or Nats-Expected-* that do not
// hold, which would block the source behind a dead letter retried forever, and it obeys
// Nats-Rollup or Nats-TTL, which would purge or expire dead letters. md is returned
// unchanged when it has no Nats-* header.
func disarmNATSHeaders(md map[string]string) map[string]string {
	list := headers.FromMetadata(md)
	found := false
	for i, f := range list {
		if hasPrefixFold(f.Key, "nats-") {
			list[i].Key = contract.HeaderOriginalPrefix + f.Key
			found = true
		}
	}
	if !found {
		return md
	}
	extra := map[string]string{}
	for k, v := range md {
		if headers.IsReserved(k) && k != headers.MetaHeaders {
			extra[k] = v
		}
	}
	return headers.ToMetadata(list, extra)
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
