//go:build fault

package fault

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	wmkafka "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testcerts"
	"github.com/delaybridge/delaybridge/internal/testkafka"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestKafkaSCRAMTLS is row H6 end to end: kfake requires SCRAM-SHA-256 over mutual TLS;
// the bridge, with its password in a file, consumes delay.in and delivers to out.secured;
// with a wrong password it stops at start with a clear error that does not show either
// password. (PLAIN and SCRAM-SHA-512 run at the adapter: TestSASLAndTLS.)
func TestKafkaSCRAMTLS(t *testing.T) {
	certs := testcerts.Generate(t)
	const pass = "kafka-S3cret-77d1"
	c := testkafka.Start(t, kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "bridge", pass), kfake.TLS(certs.ServerTLS()),
		kfake.SeedTopics(1, "delay.in", "delay.cancel", "delay.dlq", "out.secured"))
	mech, err := wmkafka.NewSASL("SCRAM-SHA-256", "bridge", pass)
	if err != nil {
		t.Fatal(err)
	}
	sec := wmkafka.Security{TLS: certs.ClientTLS(), SASL: mech}
	env := map[string]string{
		"BRIDGE_REDIS_URL":                testredis.Start(t).URL(),
		"BRIDGE_KEY_PREFIX":               testredis.Prefix(t),
		"BRIDGE_KAFKA_BROKERS":            strings.Join(c.Brokers(), ","),
		"BRIDGE_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-256",
		"BRIDGE_KAFKA_SASL_USERNAME":      "bridge",
		"BRIDGE_KAFKA_SASL_PASSWORD_FILE": secFile(t, "kafka-password", pass+"\n"),
		"BRIDGE_KAFKA_TLS_CA_FILE":        certs.CA,
		"BRIDGE_KAFKA_TLS_CERT_FILE":      certs.ClientCert,
		"BRIDGE_KAFKA_TLS_KEY_FILE":       certs.ClientKey,
		"BRIDGE_LOG_FORMAT":               "text",
		"BRIDGE_LOG_LEVEL":                "debug",
	}
	b := e2etest.StartReady(t, bridgeBin, env)

	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{Brokers: c.Brokers(), GroupID: "checker", Security: sec,
		SessionTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: 5 * time.Second,
		DrainTimeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := sub.Subscribe(ctx, "out.secured")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: c.Brokers(), Security: sec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const n = 50
	var msgs []*message.Message
	for i := range n {
		m := message.NewMessage(strconv.Itoa(i), []byte("p"))
		m.Metadata.Set("x-delay", strconv.Itoa(i*7919%300))
		m.Metadata.Set("x-target", "out.secured")
		m.Metadata.Set("seq", strconv.Itoa(i))
		msgs = append(msgs, m)
	}
	if err := pub.Publish("delay.in", msgs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
	got, early := map[string]int{}, 0
	for len(got) < n {
		select {
		case m := <-out:
			due, _ := strconv.ParseInt(m.Metadata.Get("x-delay-due"), 10, 64)
			if time.Now().UnixMilli() < due {
				early++
			}
			got[m.Metadata.Get("seq")]++
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("delivered %d of %d\n%s", len(got), n, b.Out.String())
		}
	}
	if early != 0 {
		t.Fatalf("%d early", early)
	}
	b.Kill(t)

	const wrong = "wrong-S3cret-0000"
	fb := e2etest.Start(t, bridgeBin, secEnv(env, "BRIDGE_KAFKA_SASL_PASSWORD_FILE", "", "BRIDGE_KAFKA_SASL_PASSWORD", wrong))
	if err := fb.Wait(t, 20*time.Second); err == nil {
		t.Fatal("wrong Kafka password: exit 0")
	}
	if !strings.Contains(fb.Out.String(), "kafka refused the bridge's credentials") {
		t.Errorf("no clear error:\n%s", fb.Out.String())
	}
	secNoSecrets(t, map[string]string{"bridge output": b.Out.String(), "wrong password output": fb.Out.String()}, pass, wrong)
	t.Logf("H6: messages %d, delivered %d, early 0 over SCRAM-SHA-256 + mTLS; wrong password: start fails, no password in output", n, len(got))
}
