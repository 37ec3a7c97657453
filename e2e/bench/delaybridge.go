package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// dbSystem: redis-server + embedded NATS JetStream + `replicas` bridge processes.
// Input: JetStream stream IN on delay.in; output: stream OUT on bench.out.>, observed by a
// core subscription on a separate connection.
type dbSystem struct {
	rp      *redisProc   // nil on a Redis Cluster
	masters []*redisProc // Redis Cluster: the masters
	replica *redisProc   // with waitReplicas > 0: the primary's replica
	np      *natsProc
	bridges []*bridgeProc
	pubNC   *nats.Conn
	subNC   *nats.Conn
	js      jetstream.JetStream
	cons    jetstream.Consumer
	r       *recorder
	pubErrs atomic.Int64
	ks      *kafkaSource // Kafka variant: the source is kfake, the target still NATS
	// sample is the first released message seen (the ceiling publishes copies of it).
	sample atomic.Pointer[nats.Msg]
}

// dbOpts shapes a delaybridge system.
type dbOpts struct {
	fsync    string // AOF fsync: everysec or always
	replicas int    // bridge processes
	capacity int    // arrivals the recorder keeps
	kafka    bool   // the source is kfake instead of JetStream
	// wait > 0: Redis gets one replica and the bridges run with BRIDGE_REDIS_MIN_REPLICAS=wait.
	wait int
	// shards > 0: BRIDGE_SHARDS (else the bridge's default, benchShards).
	shards int
	// gomaxprocs > 0: GOMAXPROCS of every bridge (a sidecar with a CPU limit of about that
	// many cores, as Go's cgroup-aware default would set it).
	gomaxprocs int
	// clusterMasters > 0: a Redis Cluster of that many masters (BRIDGE_REDIS_CLUSTER_ADDRS)
	// instead of one redis-server.
	clusterMasters int
	// env: more variables for every bridge (the firing rows' BRIDGE_TARGET_RATE).
	env map[string]string
}

// startDelaybridge starts Redis (with o.wait > 0: plus one replica, and the bridges run
// with BRIDGE_REDIS_MIN_REPLICAS=o.wait; with o.clusterMasters > 0: a Redis Cluster),
// NATS and the bridge replicas, and returns once every replica answers /readyz.
func startDelaybridge(bin string, o dbOpts) (_ *dbSystem, err error) {
	s := &dbSystem{r: newRecorder(o.capacity)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	fsync, waitReplicas, kafka := o.fsync, o.wait, o.kafka
	switch {
	case o.clusterMasters > 0:
		s.masters, err = startCluster(fsync, o.clusterMasters)
	case waitReplicas == 0:
		s.rp, err = startRedis(fsync)
	default:
		s.rp, err = startRedis(fsync, "--repl-diskless-sync-delay", "0")
	}
	if err != nil {
		return nil, err
	}
	if waitReplicas > 0 {
		if s.replica, err = startReplica(s.rp, fsync); err != nil {
			return nil, err
		}
	}
	if err = s.startJetStream(); err != nil {
		return nil, err
	}
	env := map[string]string{
		"BRIDGE_NATS_URL":    s.np.url(),
		"BRIDGE_NATS_STREAM": "IN",
		"BRIDGE_KEY_PREFIX":  benchPrefix,
	}
	if s.rp != nil {
		env["BRIDGE_REDIS_URL"] = "redis://" + s.rp.addr + "/0"
	} else {
		var addrs []string
		for _, m := range s.masters {
			addrs = append(addrs, m.addr)
		}
		env["BRIDGE_REDIS_CLUSTER_ADDRS"] = strings.Join(addrs, ",")
	}
	if o.shards > 0 {
		env["BRIDGE_SHARDS"] = strconv.Itoa(o.shards)
	}
	if o.gomaxprocs > 0 {
		env["GOMAXPROCS"] = strconv.Itoa(o.gomaxprocs)
	}
	for k, v := range o.env {
		env[k] = v
	}
	if waitReplicas > 0 {
		env["BRIDGE_REDIS_MIN_REPLICAS"] = strconv.Itoa(waitReplicas)
	}
	if kafka {
		if s.ks, err = startKafka(); err != nil {
			return nil, err
		}
		env["BRIDGE_KAFKA_BROKERS"] = s.ks.brokers()
	}
	if s.bridges, err = startBridges(bin, env, o.replicas); err != nil {
		return nil, err
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second) // ctx may be spent by a slow fleet start
	defer ccancel()
	if s.cons, err = s.js.Consumer(cctx, "IN", "delaybridge"); err != nil {
		return nil, fmt.Errorf("bridge consumer: %w", err)
	}
	return s, nil
}

// startJetStream starts the embedded NATS server and the harness's side of it: the
// publishing and the observing connections, streams IN and OUT, and the core subscription
// on bench.out.> that records every arrival by its x-delay-due header.
func (s *dbSystem) startJetStream() (err error) {
	if s.np, err = startNATS(); err != nil {
		return err
	}
	if s.pubNC, err = nats.Connect(s.np.url()); err != nil {
		return err
	}
	if s.subNC, err = nats.Connect(s.np.url()); err != nil {
		return err
	}
	s.js, err = jetstream.New(s.pubNC, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { s.pubErrs.Add(1) }))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"delay.in", "delay.cancel"},
		Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("stream IN: %w", err)
	}
	if _, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"bench.out.>"},
		Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("stream OUT: %w", err)
	}
	sub, err := s.subNC.Subscribe("bench.out.>", func(m *nats.Msg) {
		now := time.Now().UnixNano()
		if s.sample.Load() == nil {
			s.sample.CompareAndSwap(nil, m)
		}
		due, perr := strconv.ParseInt(headerValue(m.Header, "x-delay-due"), 10, 64)
		if perr != nil {
			s.r.bad.Add(1)
			return
		}
		s.r.arrive(now, due*1e6)
	})
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err = s.subNC.Flush(); err != nil {
		return err
	}
	return nil
}

func headerValue(h nats.Header, key string) string {
	if v, ok := h[key]; ok && len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && len(k) == len(key) && equalFold(k, key) {
			return v[0]
		}
	}
	return ""
}

func equalFold(a, b string) bool {
	for i := range len(a) {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}

func (s *dbSystem) name() string {
	if s.ks != nil {
		return "delaybridge/kafka"
	}
	return "delaybridge"
}

func (s *dbSystem) rec() *recorder { return s.r }
func (s *dbSystem) redisNodes() []*redisProc {
	if s.rp == nil {
		return s.masters
	}
	return []*redisProc{s.rp}
}
func (s *dbSystem) workerCPU() float64 {
	var c float64
	for _, b := range s.bridges {
		c += b.cpuSeconds()
	}
	return c
}

var benchPayload = func() []byte {
	b := make([]byte, payloadSize)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}()

func (s *dbSystem) send(n int, gen func(int) sched, rate float64) error {
	if s.ks != nil {
		return s.ks.send(n, gen, rate)
	}
	start := time.Now()
	for i := range n {
		if rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > time.Millisecond {
				time.Sleep(wait)
			}
		}
		sc := gen(i)
		m := nats.NewMsg("delay.in")
		m.Data = benchPayload
		m.Header["x-target"] = []string{"bench.out.w"}
		if sc.every != "" {
			m.Header["x-delay-every"] = []string{sc.every}
		}
		if sc.window != "" {
			m.Header["x-delay-window"] = []string{sc.window}
		}
		if sc.key != "" {
			m.Header["x-delay-ordering-key"] = []string{sc.key}
		}
		if sc.abs {
			m.Header["x-deliver-at"] = []string{strconv.FormatInt(sc.at.UnixMilli(), 10)}
		} else {
			m.Header["x-delay"] = []string{strconv.FormatInt(sc.delay.Milliseconds(), 10)}
		}
		if _, err := s.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
	}
	select {
	case <-s.js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return errors.New("publishes not acknowledged by the stream within 2 min")
	}
	if e := s.pubErrs.Load(); e > 0 {
		return fmt.Errorf("%d publishes failed", e)
	}
	return nil
}

// waitIngested polls the bridge's durable consumer until its ack floor covers total
// stream sequences (a fresh stream holds only benchmark messages, from sequence 1).
func (s *dbSystem) waitIngested(total int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for s.ks != nil {
		got, err := parkedFromMetrics(s.bridges, "kafka")
		now := time.Now()
		if err == nil && got >= int64(total) {
			return now, nil
		}
		if now.After(deadline) {
			return now, fmt.Errorf("bridge parked %d of %d within %s (err %v)", got, total, timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := s.cons.Info(ctx)
		cancel()
		now := time.Now()
		if err == nil && info.AckFloor.Stream >= uint64(total) {
			return now, nil
		}
		if now.After(deadline) {
			if err == nil {
				return now, fmt.Errorf("bridge acked %d of %d within %s", info.AckFloor.Stream, total, timeout)
			}
			return now, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *dbSystem) close() {
	stopBridges(s.bridges)
	if s.pubNC != nil {
		s.pubNC.Close()
	}
	if s.subNC != nil {
		s.subNC.Close()
	}
	if s.ks != nil {
		s.ks.close()
	}
	if s.np != nil {
		s.np.stop()
	}
	if s.replica != nil {
		s.replica.stop()
	}
	if s.rp != nil {
		s.rp.stop()
	}
	for _, m := range s.masters {
		m.stop()
	}
}

// benchShards is the bridge's BRIDGE_SHARDS (its default) and benchPrefix its
// BRIDGE_KEY_PREFIX: the store's keys are {bench:<shard>}:z, :m, and the tombstone sets
// :tn and :to.
const (
	benchShards = 16
	benchPrefix = "bench"
)

// storeCounts sums, over the shards, the parked entries (ZCARD z) and the tombstones
// (SCARD tn + SCARD to), in one pipeline.
func (s *dbSystem) storeCounts() (parked, tombstones int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pipe := s.rp.rdb.Pipeline()
	zs, ts := make([]*redis.IntCmd, benchShards), make([]*redis.IntCmd, 2*benchShards)
	for i := range benchShards {
		tag := fmt.Sprintf("{%s:%d}", benchPrefix, i)
		zs[i] = pipe.ZCard(ctx, tag+":z")
		ts[i], ts[benchShards+i] = pipe.SCard(ctx, tag+":tn"), pipe.SCard(ctx, tag+":to")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, err
	}
	for i := range benchShards {
		parked += zs[i].Val()
	}
	for _, c := range ts {
		tombstones += c.Val()
	}
	return parked, tombstones, nil
}

// tombstoneBytes waits until the store holds no parked entry (every message delivered and
// acked) and returns the tombstones left and Redis used_memory beyond before per
// tombstone: once z and m are empty Redis has deleted them, so what remains beyond the
// memory before the workload is the tombstone sets (and 16 small seq counters).
func (s *dbSystem) tombstoneBytes(before int64) (n int64, perTombstone float64, err error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		parked, tombs, err := s.storeCounts()
		if err != nil {
			return 0, 0, err
		}
		if parked == 0 {
			if tombs == 0 {
				return 0, 0, errors.New("no tombstones after the burst")
			}
			used := s.rp.stats().usedMemory
			return tombs, float64(used-before) / float64(tombs), nil
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%d entries still parked 30 s after the burst", parked)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
