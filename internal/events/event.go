package events

import (
	"strconv"
	"unicode/utf8"
)

// The kinds of Event.
const (
	// Delivered: a message was published to its target and confirmed.
	Delivered = "delivered"
	// DeadLettered: a message went to the dead-letter subject (Reason says why).
	DeadLettered = "dead_lettered"
	// Expired: a message's x-delay-expires passed; it was dead-lettered as expired.
	Expired = "expired"
	// Changed: a change made through the message API (Op says which).
	Changed = "changed"
	// Missed: Count events were lost for this stream (a slow reader, or a replica whose
	// events could not be relayed).
	Missed = "missed"
)

// Event is one live event. Fields that do not apply to its Type are zero and left out of
// its JSON.
type Event struct {
	Type string `json:"type"`
	// At is when it happened, unix ms.
	At int64 `json:"at"`
	// ID and Target name the message (Changed: when the change named one; a bulk change
	// carries its selector in Target).
	ID     string `json:"id,omitempty"`
	Target string `json:"target,omitempty"`
	// Due is the message's due time, unix ms.
	Due int64 `json:"due,omitempty"`
	// Attempts is the delivery attempt this event ended (1 for a first delivery).
	Attempts int `json:"attempts,omitempty"`
	// Reason is a dead letter's reason code (contract.Reason*).
	Reason string `json:"reason,omitempty"`
	// Op is a Changed event's operation: park, cancel, bulk_cancel, bulk_reschedule,
	// bulk_deliver_now, bulk_resume, redrive.
	Op string `json:"op,omitempty"`
	// Count: a Changed event's messages (bulk, redrive), or a Missed event's lost events.
	Count int64 `json:"count,omitempty"`
}

// AppendJSON appends e's JSON to b (the same as encoding/json's, without reflection:
// a stream encodes every event it sends).
func (e *Event) AppendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = strconv.AppendQuote(b, e.Type)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, e.At, 10)
	b = appendString(b, "id", e.ID)
	b = appendString(b, "target", e.Target)
	b = appendInt(b, "due", e.Due)
	b = appendInt(b, "attempts", int64(e.Attempts))
	b = appendString(b, "reason", e.Reason)
	b = appendString(b, "op", e.Op)
	b = appendInt(b, "count", e.Count)
	return append(b, '}')
}

func appendString(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return appendQuoteJSON(b, v)
}

func appendInt(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, v, 10)
}

// appendQuoteJSON appends v as a JSON string: control characters, quote, backslash and
// the characters HTML treats specially escaped; invalid UTF-8 replaced.
func appendQuoteJSON(b []byte, v string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, r := range v {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == 0x2028 || r == 0x2029:
			b = append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		default:
			b = utf8.AppendRune(b, r) // utf8.RuneError for an invalid byte
		}
	}
	return append(b, '"')
}
