package main

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDevKafka: `bridge dev --kafka` starts the Kafka stand-in beside the embedded NATS,
// its banner names its address, says it is not durable and gives the kcat round trip;
// a record produced to delay.in with x-delay and a kafka: target arrives on that topic
// after its delay, and the dev bridge without --kafka has no Kafka.
func TestDevKafka(t *testing.T) {
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	env := []string{"BRIDGE_HTTP_ADDR=127.0.0.1:0", "BRIDGE_API_ADDR=127.0.0.1:0"}
	go func() {
		done <- run(ctx, []string{"dev", "--nats-port", "0", "--kafka", "--kafka-port", "0"}, env, strings.NewReader(""), out, &syncBuffer{})
	}()
	t.Cleanup(func() { cancel(); <-done })
	addrRe := regexp.MustCompile(`Kafka     (127\.0\.0\.1:\d+)`)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(20 * time.Millisecond) {
		if m := addrRe.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no Kafka in the banner:\n%s", out.String())
		}
	}
	banner := out.String()
	for _, want := range []string{"NOT DURABLE", "STAND-IN", "echo hi | kcat -b " + addr + " -P -t delay.in -H x-delay=5s -H x-target=kafka:demo.hello",
		"kcat -b " + addr + " -C -t demo.hello"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("demo.hello"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sent := time.Now()
	rec := &kgo.Record{Topic: "delay.in", Value: []byte("hi"), Headers: []kgo.RecordHeader{
		{Key: "x-delay", Value: []byte("300ms")}, {Key: "x-target", Value: []byte("kafka:demo.hello")}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	defer pcancel()
	fs := cl.PollFetches(pctx)
	if err := fs.Err0(); err != nil {
		t.Fatalf("poll demo.hello: %v", err)
	}
	got := fs.Records()
	if len(got) != 1 || string(got[0].Value) != "hi" || time.Since(sent) < 300*time.Millisecond {
		t.Fatalf("demo.hello got %d records (%v) %s after the send", len(got), got, time.Since(sent))
	}
	var delayID string
	for _, h := range got[0].Headers {
		if h.Key == "x-delay-source" {
			delayID = string(h.Value)
		}
	}
	if delayID != "kafka:delay.in" {
		t.Fatalf("x-delay-source %q", delayID)
	}
}

// syncBuffer is a strings.Builder safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
