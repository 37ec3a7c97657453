package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaSource is the Kafka variant of the ingress: an in-process kfake broker holding
// topic delay.in; records carry x-target nats:bench.out.w so the output side (JetStream
// stream OUT, core subscriber) is the same as for NATS.
type kafkaSource struct {
	c *kfake.Cluster
	w *kgo.Client
}

const kafkaPartitions = 4

func startKafka() (*kafkaSource, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kafkaPartitions, "delay.in", "delay.cancel"),
		kfake.AllowAutoTopicCreation(), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	w, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("delay.in"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &kafkaSource{c: c, w: w}, nil
}

func (k *kafkaSource) brokers() string { return strings.Join(k.c.ListenAddrs(), ",") }

func (k *kafkaSource) close() {
	k.w.Close()
	k.c.Close()
}

// send writes n records in chunks (1000 per write, 4 writers in parallel; paced chunks of
// rate/100 every 10 ms when rate > 0).
func (k *kafkaSource) send(n int, gen func(int) sched, rate float64) error {
	chunk, par := 1000, 4
	if rate > 0 {
		chunk, par = max(1, int(rate/100)), 1
	}
	start := time.Now()
	var mu sync.Mutex
	next := 0
	var firstErr error
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= n || firstErr != nil {
					mu.Unlock()
					return
				}
				from := next
				to := min(n, from+chunk)
				next = to
				mu.Unlock()
				if rate > 0 {
					if wait := time.Until(start.Add(time.Duration(float64(from) / rate * float64(time.Second)))); wait > time.Millisecond {
						time.Sleep(wait)
					}
				}
				msgs := make([]*kgo.Record, 0, to-from)
				for i := from; i < to; i++ {
					sc := gen(i)
					h := []kgo.RecordHeader{{Key: "x-target", Value: []byte("nats:bench.out.w")}}
					if sc.abs {
						h = append(h, kgo.RecordHeader{Key: "x-deliver-at", Value: []byte(strconv.FormatInt(sc.at.UnixMilli(), 10))})
					} else {
						h = append(h, kgo.RecordHeader{Key: "x-delay", Value: []byte(strconv.FormatInt(sc.delay.Milliseconds(), 10))})
					}
					msgs = append(msgs, &kgo.Record{Value: benchPayload, Headers: h})
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := k.w.ProduceSync(ctx, msgs...).FirstErr()
				cancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("kafka write: %w", err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// parkedFromMetrics sums delaybridge_messages_in_total{result="parked"} over the bridges.
func parkedFromMetrics(bridges []*bridgeProc, broker string) (int64, error) {
	var total int64
	for _, b := range bridges {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.httpAddr+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			return 0, err
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if !strings.HasPrefix(l, "delaybridge_messages_in_total{") || !strings.Contains(l, `result="parked"`) ||
				!strings.Contains(l, `broker="`+broker+`"`) {
				continue
			}
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				total += int64(v)
			}
		}
		resp.Body.Close()
		cancel()
	}
	return total, nil
}
