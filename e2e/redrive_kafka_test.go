package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaLetters produces n dead letters to topic as the bridge writes them: the message's
// headers (x-target, x-delay-id id-i, extra), x-delay-due and x-delay-error.
func kafkaLetters(t *testing.T, cl *kgo.Client, topic, prefix, target, errText string, n int, extra ...string) {
	t.Helper()
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		r := &kgo.Record{Topic: topic, Value: []byte(id), Headers: []kgo.RecordHeader{
			{Key: "x-target", Value: []byte(target)}, {Key: "x-delay-id", Value: []byte(id)},
			{Key: "x-delay-due", Value: []byte("5")}, {Key: "x-delay-error", Value: []byte(errText)}}}
		for j := 0; j+1 < len(extra); j += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: extra[j], Value: []byte(extra[j+1])})
		}
		recs = append(recs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce dead letters: %v", err)
	}
}

// TestRedriveKafkaConcurrentRuns (issue 24, item 3; fault row R3): two `bridge redrive`
// runs at once on Kafka over 1,000 target_not_allowed letters (the allow-list was widened
// since), 500 invalid_delay ones (still invalid: the bridge refuses them again) and 50
// forbidden ones not selected. Both exit 0; between them they redrive each letter once
// (1,000 delivered, each once; 500 new invalid_delay letters, not 1,000), and their tables
// add up: REDRIVEN 1,000, REFUSED AGAIN 500, LEFT 50.
func TestRedriveKafkaConcurrentRuns(t *testing.T) {
	s, cl := kafkaStack(t, false)
	brokers := strings.Split(s.env["BRIDGE_KAFKA_BROKERS"], ",")
	target := s.name("billing.due")
	s.createTopic(t, brokers, target, 3)
	dlq := s.name("delay.dlq")
	kafkaLetters(t, cl, dlq, "ok", target, "target_not_allowed: "+target, 1000)
	kafkaLetters(t, cl, dlq, "bad", target, "invalid_delay: soon", 500, "x-delay", "soon")
	kafkaLetters(t, cl, dlq, "left", target, "forbidden: "+target, 50)
	startBridge(t, s.env)
	arrivals := consume(t, brokers, target)
	letters := consume(t, brokers, dlq)

	outs, errs := redriveTogether(s.env, "--reason", "target_not_allowed,invalid_delay", "--wait", "5s")
	sum := map[string][]int{}
	for i := range 2 {
		if errs[i] != nil {
			t.Errorf("run %d: %v\n%s", i, errs[i], outs[i])
		}
		t.Logf("run %d:\n%s", i, outs[i])
		for _, reason := range []string{"target_not_allowed", "invalid_delay", "forbidden"} {
			r := row(outs[i], reason)
			if sum[reason] == nil {
				sum[reason] = make([]int, 4)
			}
			for j := range min(len(r), 4) {
				sum[reason][j] += r[j]
			}
		}
	}
	for reason, want := range map[string][]int{"target_not_allowed": {1000, 0, 0, 0}, "invalid_delay": {0, 500, 0, 0}, "forbidden": {0, 0, 50, 0}} {
		if fmt.Sprint(sum[reason]) != fmt.Sprint(want) {
			t.Errorf("%s: the runs' rows add up to %v (REDRIVEN, REFUSED AGAIN, LEFT, OTHER RUN), want %v", reason, sum[reason], want)
		}
	}

	delivered := map[string]int{}
	deadline := time.After(30 * time.Second)
	for len(delivered) < 1000 {
		select {
		case a := <-arrivals:
			id, _ := header(a.rec, "x-delay-id")
			delivered[id]++
		case <-deadline:
			t.Fatalf("%d of 1000 letters delivered", len(delivered))
		}
	}
	total := map[string]int{} // dead letters by reason code
	for quiet := false; !quiet; {
		select {
		case a := <-arrivals: // a second copy
			id, _ := header(a.rec, "x-delay-id")
			delivered[id]++
		case l := <-letters:
			e, _ := header(l.rec, "x-delay-error")
			code, _, _ := strings.Cut(e, ":")
			total[code]++
		case <-time.After(2 * time.Second):
			quiet = true
		}
	}
	twice := 0
	for _, n := range delivered {
		if n != 1 {
			twice++
		}
	}
	t.Logf("delivered %d ids, %d more than once; dead-letter topic by reason: %v", len(delivered), twice, total)
	if twice != 0 {
		t.Errorf("%d letters delivered more than once", twice)
	}
	if want := map[string]int{"target_not_allowed": 1000, "invalid_delay": 1000, "forbidden": 50}; fmt.Sprint(total) != fmt.Sprint(want) {
		t.Errorf("dead-letter topic holds %v, want %v (500 invalid_delay letters and their 500 refused again)", total, want)
	}
}
