package intake

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/contract"
)

// TestOutgoingSizeCounts checks the counted size of an outgoing message against sizes
// worked out by hand from the NATS header framing and the Kafka record layout.
func TestOutgoingSizeCounts(t *testing.T) {
	fwd := hl("k", "v", contract.HeaderHops, "1")
	payload := []byte(strings.Repeat("p", 100))
	// NATS: "NATS/1.0\r\n" 10 + "\r\n" 2; "k: v\r\n" 6; "x-delay-hops: 1\r\n" 17;
	// "x-delay-id: src-1\r\n" 19; x-delay-due with 20 digits 35; "x-delay-source:
	// nats:delay.in\r\n" 31; Nats-Msg-Id "src-1:" + 20 digits 41 = 161 header bytes.
	if got, want := outgoingSize(BrokerNATS, fwd, "src-1", "nats:delay.in", nil, payload), int64(161+100+sizeMargin); got != want {
		t.Errorf("nats size = %d, want %d", got, want)
	}
	// With a Kafka key, x-kafka-key is counted: "x-kafka-key: kk\r\n" 17 more.
	if got, want := outgoingSize(BrokerNATS, fwd, "src-1", "nats:delay.in", []byte("kk"), payload), int64(161+17+100+sizeMargin); got != want {
		t.Errorf("nats size with key = %d, want %d", got, want)
	}
	// Kafka: record overhead 27 + key 2 + value 100; headers 10 + name + value each:
	// k/v 12, x-delay-hops 23, x-delay-id 25, x-delay-due 41, x-delay-source 37 = 138.
	if got, want := outgoingSize(BrokerKafka, fwd, "src-1", "nats:delay.in", []byte("kk"), payload), int64(27+2+100+138+sizeMargin); got != want {
		t.Errorf("kafka size = %d, want %d", got, want)
	}
	// From NATS without a record key, the x-kafka-key header becomes the key as well.
	fwdKey := hl(contract.HeaderKafkaKey, "abc", contract.HeaderHops, "1")
	if got, want := outgoingSize(BrokerKafka, fwdKey, "i", "http", nil, nil), int64(27+3+(10+11+3)+23+(10+10+1)+41+(10+14+4)+sizeMargin); got != want {
		t.Errorf("kafka size with x-kafka-key = %d, want %d", got, want)
	}
}

// TestPrepareBrokerLimit: a message whose outgoing form exceeds the target broker's limit
// is rejected with payload_too_large at the limit's edge, for each broker; the limit is
// read at check time; an unknown limit (<= 0) is not checked.
func TestPrepareBrokerLimit(t *testing.T) {
	var natsLimit atomic.Int64
	natsLimit.Store(4096)
	r := prepareRules()
	r.Limits = SizeLimitsFunc(func(broker string) int64 {
		if broker == BrokerKafka {
			return 2048
		}
		return natsLimit.Load()
	})
	now := time.Now()
	for _, tc := range []struct {
		name, target string
		limit        int64
	}{{"nats", "nats:a.b", 4096}, {"kafka", "kafka:a.b", 2048}} {
		t.Run(tc.name, func(t *testing.T) {
			in := prepareIn("nats", "x-target", tc.target, "k", "v")
			broker, _, _ := strings.Cut(tc.target, ":")
			fits := int(tc.limit - outgoingSize(broker, hl("k", "v", contract.HeaderHops, "1"), "src-1", "nats:delay.in", nil, nil))
			in.Payload = make([]byte, fits)
			if _, err := r.Prepare(in, now); err != nil {
				t.Fatalf("payload of %d (outgoing exactly at the limit %d): %v", fits, tc.limit, err)
			}
			in.Payload = make([]byte, fits+1)
			_, err := r.Prepare(in, now)
			if !errors.Is(err, ErrPayloadTooLarge) || Reason(err) != contract.ReasonPayloadTooLarge {
				t.Fatalf("payload of %d (one byte over): err = %v, want payload_too_large", fits+1, err)
			}
			if !strings.Contains(err.Error(), "limit of") {
				t.Errorf("error does not name the limit: %v", err)
			}
		})
	}

	in := prepareIn("nats", "x-target", "a.b")
	in.Payload = make([]byte, 1000)
	if _, err := r.Prepare(in, now); err != nil {
		t.Fatalf("1000 bytes under a 4096 limit: %v", err)
	}
	natsLimit.Store(512) // the server's max_payload changed on reconnect
	if _, err := r.Prepare(in, now); Reason(err) != contract.ReasonPayloadTooLarge {
		t.Fatalf("after the limit fell to 512: err = %v, want payload_too_large", err)
	}
	natsLimit.Store(0) // unknown: only MaxPayload applies
	if _, err := r.Prepare(in, now); err != nil {
		t.Fatalf("unknown limit: %v", err)
	}
	in.Payload = make([]byte, r.MaxPayload+1)
	if _, err := r.Prepare(in, now); Reason(err) != contract.ReasonPayloadTooLarge {
		t.Fatalf("over BRIDGE_MAX_PAYLOAD: err = %v", err)
	}
}
