package nats

import (
	"fmt"
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

// toNATS builds the wire message for msg: the non-reserved metadata as headers (repeated
// keys in order, names as given) and Nats-Msg-Id = msg.UUID (replacing any such header in
// the metadata). Invalid header names are rejected by nats.go at publish time.
func toNATS(subject string, msg *message.Message) *natsgo.Msg {
	list := headers.FromMetadata(msg.Metadata)
	h := make(natsgo.Header, len(list)+1)
	for _, f := range list {
		if strings.EqualFold(f.Key, MsgIDHeader) {
			continue
		}
		h[f.Key] = append(h[f.Key], f.Value)
	}
	if msg.UUID != "" {
		h[MsgIDHeader] = []string{msg.UUID}
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: msg.Payload}
}

// fromNATS builds the watermill message for a received NATS message. The UUID is the
// Nats-Msg-Id header when present, else a new ULID; Nats-Msg-Id itself is not metadata.
// Headers with the reserved prefix are dropped: a producer cannot set the bridge's
// internal metadata. extra (reserved keys set by the adapter) is added as is.
func fromNATS(h natsgo.Header, data []byte, extra map[string]string) *message.Message {
	var uuid string
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a Go map has no order; repeated values keep theirs below
	var list headers.List
	for _, k := range keys {
		vs := h[k]
		switch {
		case strings.EqualFold(k, MsgIDHeader):
			if uuid == "" && len(vs) > 0 {
				uuid = vs[0]
			}
			continue
		case headers.IsReserved(k):
			continue
		}
		for _, v := range vs {
			list.Add(k, v)
		}
	}
	if uuid == "" {
		uuid = watermill.NewULID()
	}
	msg := message.NewMessage(uuid, data)
	msg.Metadata = headers.ToMetadata(list, extra)
	return msg
}

// sourceID is the stable identity of a JetStream message.
func sourceID(stream string, seq uint64) string {
	return fmt.Sprintf("js:%s:%d", stream, seq)
}
