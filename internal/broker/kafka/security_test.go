package kafka_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/testcerts"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// TestSASLAndTLS is row H6 at the adapter: against kfake with SASL and mutual TLS, for
// each of PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, the publisher and the subscriber carry
// a message; a wrong password, a missing client certificate and plaintext are refused,
// a wrong password as an auth error (the bridge stops at start) that does not show it.
func TestSASLAndTLS(t *testing.T) {
	certs := testcerts.Generate(t)
	const pass = "kafka-Pa55-0b5e"
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			c := testkafka.Start(t, kfake.NumBrokers(1), kfake.EnableSASL(),
				kfake.Superuser(mech, "bridge", pass), kfake.TLS(certs.ServerTLS()))
			brokers := c.Brokers()
			good := security(t, certs.ClientTLS(), mech, pass)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := wmkafka.PingWith(ctx, brokers, good); err != nil {
				t.Fatalf("ping: %v", err)
			}

			wrong := security(t, certs.ClientTLS(), mech, "wrong-"+pass)
			err := wmkafka.PingWith(ctx, brokers, wrong)
			if err == nil || !wmkafka.IsAuthError(err) {
				t.Errorf("wrong password: %v, want an auth error", err)
			} else if strings.Contains(err.Error(), pass) {
				t.Errorf("error shows the password: %v", err)
			}
			noCert := certs.ClientTLS()
			noCert.Certificates = nil
			if err := wmkafka.PingWith(ctx, brokers, security(t, noCert, mech, pass)); err == nil {
				t.Error("no client certificate: ping succeeded")
			}
			if err := wmkafka.PingWith(ctx, brokers, wmkafka.Security{SASL: good.SASL}); err == nil {
				t.Error("plaintext: ping succeeded")
			}
			otherCA := testcerts.Generate(t).ClientTLS()
			if err := wmkafka.PingWith(ctx, brokers, security(t, otherCA, mech, pass)); err == nil {
				t.Error("unknown server CA: ping succeeded")
			}

			pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: brokers, Security: good, AllowAutoTopicCreation: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			if err := pub.Publish("secured", message.NewMessage(watermill.NewUUID(), []byte("hello"))); err != nil {
				t.Fatalf("publish: %v", err)
			}
			sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{Brokers: brokers, GroupID: "g", Security: good,
				SessionTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: 5 * time.Second,
				DrainTimeout: time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			ch, err := sub.Subscribe(ctx, "secured")
			if err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-ch:
				if string(m.Payload) != "hello" {
					t.Errorf("payload %q", m.Payload)
				}
				m.Ack()
			case <-ctx.Done():
				t.Fatal("no message over SASL + TLS")
			}
			if badPub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: brokers, Security: wrong, WriteTimeout: 3 * time.Second}, nil); err == nil {
				err := badPub.Publish("secured", message.NewMessage(watermill.NewUUID(), []byte("x")))
				if err == nil {
					t.Error("publish with a wrong password succeeded")
				} else if strings.Contains(err.Error(), pass) {
					t.Errorf("publish error shows the password: %v", err)
				}
				badPub.Close()
			}
		})
	}
}

func security(t *testing.T, conf *tls.Config, mech, pass string) wmkafka.Security {
	t.Helper()
	m, err := wmkafka.NewSASL(mech, "bridge", pass)
	if err != nil {
		t.Fatal(err)
	}
	return wmkafka.Security{TLS: conf, SASL: m}
}
