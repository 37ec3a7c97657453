package nats

import (
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// MsgIDHeader is the NATS header that carries a message's watermill UUID. JetStream
// deduplicates on it.
const MsgIDHeader = jetstream.MsgIDHeader // "Nats-Msg-Id"

// toNATS builds the wire message for msg: [listToNATS] of its non-reserved metadata
// (headers.FromMetadata) with ID msg.UUID.
func toNATS(subject string, msg *message.Message) *natsgo.Msg {
	return listToNATS(subject, &headers.Message{ID: msg.UUID, Headers: headers.FromMetadata(msg.Metadata), Payload: msg.Payload})
}

// listToNATS builds the wire message for m: its non-reserved headers (repeated keys in
// order, names as given) and Nats-Msg-Id = m.ID (replacing any such header in the list).
// Invalid header names are rejected by nats.go at publish time. A key's first value gets a
// one-value slice of a shared backing array (capacity 1, so a repeat appends into a new
// one): two allocations for the headers of a message, not one per key.
func listToNATS(subject string, m *headers.Message) *natsgo.Msg {
	h := make(natsgo.Header, len(m.Headers)+1)
	vals := make([]string, len(m.Headers)+1)
	n := 0
	for _, f := range m.Headers {
		if headers.IsReserved(f.Key) || strings.EqualFold(f.Key, MsgIDHeader) {
			continue
		}
		if vs, ok := h[f.Key]; ok {
			h[f.Key] = append(vs, f.Value)
			continue
		}
		vals[n] = f.Value
		h[f.Key] = vals[n : n+1 : n+1]
		n++
	}
	if m.ID != "" {
		vals[n] = m.ID
		h[MsgIDHeader] = vals[n : n+1 : n+1]
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: m.Payload}
}

// fromNATS builds the watermill message for a received NATS message. The UUID is the
// Nats-Msg-Id header when present, else a new ULID; Nats-Msg-Id itself is not metadata.
// A header with the reserved prefix is kept inside headers.MetaHeaders, never as a plain
// key (headers.ToMetadata): a producer cannot set the bridge's internal metadata, and
// intake refuses the message. extra (reserved keys set by the adapter, as key, value,
// key, value...) is added as is.
func fromNATS(h natsgo.Header, data []byte, extra ...string) *message.Message {
	list, uuid := appendHeaders(make(headers.List, 0, len(h)), h)
	return watermillMessage(uuid, list, data, extra...)
}

// watermillMessage is the watermill message of a NATS message read as list and data, with
// UUID id (a new ULID when "") and the reserved metadata extra (key, value, ...).
func watermillMessage(id string, list headers.List, data []byte, extra ...string) *message.Message {
	if id == "" {
		id = watermill.NewULID()
	}
	msg := message.NewMessage(id, data)
	msg.Metadata = headers.ToMetadata(list, nil)
	for i := 0; i+1 < len(extra); i += 2 {
		msg.Metadata[extra[i]] = extra[i+1]
	}
	return msg
}

// appendHeaders appends the headers of h to list, keys in sorted order (a Go map has no
// order), a repeated key's values in theirs, without Nats-Msg-Id (returned as id, its
// first value; "" when none). A header with the reserved prefix is kept, so that intake
// refuses the message rather than lose the header silently (the Received's fields, not
// its headers, carry the adapter's metadata). The keys are sorted in place of a stack
// array: for up to 16 keys nothing is allocated beyond list's growth.
func appendHeaders(list headers.List, h natsgo.Header) (_ headers.List, id string) {
	var kb [16]string
	keys := kb[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		vs := h[k]
		if strings.EqualFold(k, MsgIDHeader) {
			if id == "" && len(vs) > 0 {
				id = vs[0]
			}
			continue
		}
		for _, v := range vs {
			list = append(list, headers.Header{Key: k, Value: v})
		}
	}
	return list, id
}
