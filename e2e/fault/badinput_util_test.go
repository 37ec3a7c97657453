//go:build fault

package fault

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testkafka"
)

// withKafka adds a kfake cluster with the bridge's topics and the target topic out-kafka
// to s, turns Kafka on in the bridge env, and returns a producer client and the brokers.
func withKafka(t *testing.T, s *stack) (*kgo.Client, []string) {
	t.Helper()
	kc := testkafka.Start(t)
	brokers := kc.Brokers()
	for _, topic := range []string{"delay.in", "delay.cancel", "delay.dlq", "out-kafka"} {
		testkafka.CreateTopic(t, brokers, topic, 3)
	}
	s.env["BRIDGE_KAFKA_BROKERS"] = strings.Join(brokers, ",")
	s.env["BRIDGE_KAFKA_GROUP"] = "bridge-" + strconv.Itoa(rand.IntN(1e9))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl, brokers
}

// kafkaTap reads topic from its start in the background and hands every record to fn.
func kafkaTap(t *testing.T, brokers []string, topic string, fn func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("kgo consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(fn)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
}

// kv is one header field of a test message; order and repeats are kept.
type kv struct{ k, v string }

// hdrs builds a header list from key, value pairs.
func hdrs(pairs ...string) []kv {
	out := make([]kv, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, kv{pairs[i], pairs[i+1]})
	}
	return out
}

// tally counts messages by their "case" header, and remembers the first copy of each.
type tally struct {
	mu    sync.Mutex
	count map[string]int
	first map[string]map[string][]string // case -> header -> values
}

func newTally() *tally {
	return &tally{count: map[string]int{}, first: map[string]map[string][]string{}}
}

func (ta *tally) add(h map[string][]string) {
	vs := h["case"]
	if len(vs) == 0 {
		return
	}
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.count[vs[0]]++
	if _, ok := ta.first[vs[0]]; !ok {
		ta.first[vs[0]] = h
	}
}

func (ta *tally) addNATS(m *nats.Msg) { ta.add(m.Header) }

func (ta *tally) addKafka(r *kgo.Record) {
	h := map[string][]string{}
	for _, f := range r.Headers {
		h[f.Key] = append(h[f.Key], string(f.Value))
	}
	ta.add(h)
}

func (ta *tally) get(name string) (int, map[string][]string) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.count[name], ta.first[name]
}

// waitAll waits until every name was counted at least once, or timeout; it returns the
// names still missing.
func (ta *tally) waitAll(names []string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var missing []string
		ta.mu.Lock()
		for _, n := range names {
			if ta.count[n] == 0 {
				missing = append(missing, n)
			}
		}
		ta.mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// statsParked is the parked total from the bridge's /v1/stats.
func statsParked(t *testing.T, b *e2etest.Bridge) int64 {
	t.Helper()
	var st struct {
		Parked int64 `json:"parked"`
	}
	if err := json.Unmarshal([]byte(parked(t, b)), &st); err != nil {
		t.Fatalf("/v1/stats: %v", err)
	}
	return st.Parked
}

// natsSub subscribes fn to subj on s's connection and flushes.
func natsSub(t *testing.T, nc *nats.Conn, subj string, fn nats.MsgHandler) {
	t.Helper()
	sub, err := nc.Subscribe(subj, fn)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}
