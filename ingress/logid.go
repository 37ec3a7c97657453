package ingress

import (
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
	"github.com/delaybridge/delaybridge/internal/intake"
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
