package ingress

import (
	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/ingress/intake"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// logID is what the log says of a message's x-delay-id: its first value, cut to MaxIDLen
// bytes (a rejected message's id may be anything), or "" when it has none. Never the
// payload.
func logID(msg *headers.Received) string {
	id, _ := msg.Headers.Get(contract.HeaderID)
	if len(id) > intake.MaxIDLen {
		id = id[:intake.MaxIDLen]
	}
	return id
}
