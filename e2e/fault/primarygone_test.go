//go:build fault

package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testkafka"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// TestB7WaitPrimaryGone (issue 37 item 2): primary X + replica Y, no Sentinel, two bridges
// with BRIDGE_REDIS_URL=X and BRIDGE_REDIS_MIN_REPLICAS=1: A reads JetStream and Kafka,
// B core NATS requests, both serve the API. Under load through every ingress, X is killed
// (kill -9); from then on every message goes to a target new to the store (a name to
// intern: the path that once panicked both bridges). After 4 s X restarts on its AOF and
// Y reattaches by itself. Both bridges stay up; the API answers 503 while X is down (no
// dropped connection); every message a source or a reply acknowledged is delivered, to
// its own target, none early; every ingress parks again after the restart.
func TestB7WaitPrimaryGone(t *testing.T) {
	x := testredis.Start(t)
	testredis.StartReplica(t, x)
	s := newTopologyStack(t, "BRIDGE_REDIS_URL", x.URL(), "BRIDGE_REDIS_MIN_REPLICAS", "1",
		"BRIDGE_REDIS_WAIT_TIMEOUT", "250ms")
	kc := testkafka.Start(t)
	brokers := kc.Brokers()
	for _, topic := range []string{"delay.in", "delay.cancel", "delay.dlq"} {
		testkafka.CreateTopic(t, brokers, topic, 3)
	}
	c := newChecker(t, s)
	g := &goneLoad{c: c, want: map[string]string{}}
	// The checker watches out.fault; out.fresh counts alike, and every out.> delivery is
	// checked against its message's target.
	for subj, f := range map[string]nats.MsgHandler{"out.fresh": c.arrive, "out.>": g.checkTarget} {
		sub, err := s.nc.Subscribe(subj, f)
		if err != nil {
			t.Fatal(err)
		}
		_ = sub.SetPendingLimits(-1, -1)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	a := e2etest.StartReady(t, bridgeBin, s.envWith("BRIDGE_KAFKA_BROKERS", strings.Join(brokers, ","),
		"BRIDGE_KAFKA_GROUP", "bridge-gone"))
	envB := s.envWith("BRIDGE_NATS_SUBJECT", "core.in")
	delete(envB, "BRIDGE_NATS_STREAM")
	b := e2etest.StartReady(t, bridgeBin, envB)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)

	stop := g.start(kcl, []string{a.APIAddr, b.APIAddr})
	time.Sleep(3 * time.Second)
	g.fresh.Store(true)
	x.Kill()
	killed := time.Now()
	time.Sleep(4 * time.Second)
	for name, br := range map[string]*e2etest.Bridge{"A": a, "B": b} {
		if br.Exited() {
			stop()
			t.Fatalf("bridge %s exited with the primary gone: %v\n%s", name, br.Wait(t, 0), br.Out.String())
		}
	}
	g.mu.Lock()
	down := maps.Clone(g.api)
	g.mu.Unlock()
	x.Restart(t)
	g.restarted.Store(time.Now().UnixNano())
	restarted := time.Now()
	// Y reattaches by itself (a full resync: the restarted X has a new replication id),
	// and WAIT confirms again: wait for the API's first 201, then load 3 s more.
	for g.afterCount("api") == 0 && time.Since(restarted) < 60*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	resumed := time.Since(restarted)
	time.Sleep(3 * time.Second)
	stop()
	seqs := g.acked()
	r := c.await(seqs, 90*time.Second)

	g.mu.Lock()
	defer g.mu.Unlock()
	t.Logf("B7 primary gone (BRIDGE_REDIS_MIN_REPLICAS=1, no Sentinel): down %s, first API 201 %s after the restart; acked by ingress %v; after the restart %v; API while down %v, whole run %v; core requests answered with an error %d, timed out %d; %s; wrong target %d",
		restarted.Sub(killed).Round(100*time.Millisecond), resumed.Round(100*time.Millisecond), g.count, g.after, down, g.api, g.coreErr, g.coreTimeout, r, g.wrong)
	for name, br := range map[string]*e2etest.Bridge{"A": a, "B": b} {
		if br.Exited() {
			t.Fatalf("bridge %s exited: %v", name, br.Wait(t, 0))
		}
		if out := br.Out.String(); strings.Contains(out, "panic") {
			t.Fatalf("bridge %s logged a panic:\n%s", name, out)
		}
	}
	t.Logf("API answers other than 201: %s", strings.Join(g.trace, "; "))
	requireSafe(t, r)
	if g.wrong != 0 {
		t.Fatalf("%d deliveries to another target", g.wrong)
	}
	if g.api["dropped"] != 0 || down[503] == 0 {
		t.Fatalf("API while the primary was down: %v (want 503s, no dropped connection)", down)
	}
	for _, in := range []string{"jetstream", "kafka", "core", "api"} {
		if g.after[in] == 0 {
			t.Fatalf("no %s message acknowledged after the primary came back: %v", in, g.after)
		}
	}
}

// goneLoad sends numbered messages through JetStream (delay.in), Kafka (delay.in, target
// nats:...), core NATS requests (core.in) and the API, and keeps what each acknowledged:
// a PubAck, a Kafka produce ack, a reply with an id, a 201.
type goneLoad struct {
	c         *checker
	fresh     atomic.Bool  // targets out.fresh from now on (new to the store)
	restarted atomic.Int64 // unix ns of the primary's restart, 0 before

	mu          sync.Mutex
	want        map[string]string // seq -> its target subject
	seqs        []string          // acknowledged
	count       map[string]int    // acknowledged, by ingress
	after       map[string]int    // of those, sent after the restart
	api         map[any]int       // API answers by status ("dropped": no answer)
	coreErr     int
	coreTimeout int
	wrong       int
	trace       []string
}

// checkTarget counts a delivery on a subject other than its message's target.
func (g *goneLoad) checkTarget(m *nats.Msg) {
	seq := m.Header.Get("seq")
	g.mu.Lock()
	defer g.mu.Unlock()
	if want, ok := g.want[seq]; ok && want != m.Subject {
		g.wrong++
	}
}

// next names message i of ingress in, records its target and its earliest arrival, and
// returns the target and delay.
func (g *goneLoad) next(in string, i int) (seq, target string, d time.Duration) {
	seq = fmt.Sprintf("%s-%d", in, i)
	target = "out.fault"
	if g.fresh.Load() {
		target = "out.fresh"
	}
	d = time.Duration(i*7919%500) * time.Millisecond
	g.mu.Lock()
	g.want[seq] = target
	g.mu.Unlock()
	g.c.expect(seq, d)
	return seq, target, d
}

func (g *goneLoad) ack(in, seq string, sent time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seqs = append(g.seqs, seq)
	g.count[in]++
	if at := g.restarted.Load(); at != 0 && sent.UnixNano() > at {
		g.after[in]++
	}
}

func (g *goneLoad) afterCount(in string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.after[in]
}

func (g *goneLoad) acked() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seqs...)
}

// start runs the four senders (about 100, 100, 20 and 20 messages a second) until the
// returned stop, which waits for every JetStream and Kafka acknowledgement.
func (g *goneLoad) start(kcl *kgo.Client, apis []string) (stop func()) {
	g.count, g.after, g.api = map[string]int{}, map[string]int{}, map[any]int{}
	done := make(chan struct{})
	var wg, acks sync.WaitGroup
	every := func(d time.Duration, f func(i int)) {
		wg.Go(func() {
			tick := time.NewTicker(d)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				f(i)
			}
		})
	}
	t := g.c.t
	every(10*time.Millisecond, func(i int) { // JetStream: a PubAck means the stream has it
		seq, target, d := g.next("jetstream", i)
		m := nats.NewMsg("delay.in")
		m.Header.Set("x-delay", strconv.FormatInt(d.Milliseconds(), 10))
		m.Header.Set("x-target", target)
		m.Header.Set("seq", seq)
		sent := time.Now()
		f, err := g.c.js.PublishMsgAsync(m)
		if err != nil {
			t.Errorf("publish %s: %v", seq, err)
			return
		}
		acks.Go(func() {
			select {
			case <-f.Ok():
				g.ack("jetstream", seq, sent)
			case err := <-f.Err():
				t.Errorf("publish %s: %v", seq, err)
			}
		})
	})
	every(10*time.Millisecond, func(i int) { // Kafka: acked by the cluster
		seq, target, d := g.next("kafka", i)
		sent := time.Now()
		acks.Add(1)
		kcl.Produce(context.Background(), &kgo.Record{Topic: "delay.in", Value: []byte(seq), Headers: []kgo.RecordHeader{
			{Key: "x-delay", Value: []byte(strconv.FormatInt(d.Milliseconds(), 10))},
			{Key: "x-target", Value: []byte("nats:" + target)}, {Key: "seq", Value: []byte(seq)}}},
			func(_ *kgo.Record, err error) {
				defer acks.Done()
				if err != nil {
					t.Errorf("produce %s: %v", seq, err)
					return
				}
				g.ack("kafka", seq, sent)
			})
	})
	every(50*time.Millisecond, func(i int) { // core NATS request: acked by a reply with the id
		seq, target, d := g.next("core", i)
		m := nats.NewMsg("core.in")
		m.Header.Set("x-delay", strconv.FormatInt(d.Milliseconds(), 10))
		m.Header.Set("x-target", target)
		m.Header.Set("seq", seq)
		sent := time.Now()
		reply, err := g.c.s.nc.RequestMsg(m, 2*time.Second)
		var body struct{ ID, Error string }
		switch {
		case err != nil:
			g.mu.Lock()
			g.coreTimeout++
			g.mu.Unlock()
		case json.Unmarshal(reply.Data, &body) != nil || body.ID == "":
			g.mu.Lock()
			g.coreErr++
			g.mu.Unlock()
		default:
			g.ack("core", seq, sent)
		}
	})
	client := &http.Client{Timeout: 20 * time.Second}
	every(50*time.Millisecond, func(i int) { // API: acked by a 201
		seq, target, d := g.next("api", i)
		body, _ := json.Marshal(map[string]any{"target": target, "delay": d.Milliseconds(),
			"headers": map[string]string{"seq": seq}, "payload": seq})
		sent := time.Now()
		resp, err := client.Post("http://"+apis[i%len(apis)]+"/v1/messages", "application/json", bytes.NewReader(body))
		var status any = "dropped"
		if err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		g.mu.Lock()
		g.api[status]++
		if status != http.StatusCreated {
			g.trace = append(g.trace, fmt.Sprintf("%v in %s", status, time.Since(sent).Round(time.Millisecond)))
		}
		g.mu.Unlock()
		if status == http.StatusCreated {
			g.ack("api", seq, sent)
		}
	})
	return func() {
		close(done)
		wg.Wait()
		acks.Wait()
	}
}
