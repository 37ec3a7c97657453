package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// minimalSystem is the minimal-store baseline : the least a delay store
// on Redis can do for the same traffic, on the same kind of redis-server and the same
// JetStream streams as delaybridge. One sorted set (member = id, score = due unix ms) and
// one hash (id -> target and payload); a worker in this process that reads stream IN with
// its own durable consumer, parks what arrived in the last millisecond in one script call
// (ZADD + HSET) and then acks it, and every millisecond pops what is due by Redis TIME in
// one script call (ZRANGEBYSCORE + ZREM + HMGET + HDEL) and publishes it to the target on
// stream OUT, waiting for the PubAcks. No shards, tombstones, ownership, retries or
// at-least-once hand-off on the way out (a popped message is gone from Redis before it is
// published): a floor for Redis CPU per message and lateness, not a design.
//
// The harness side (publisher, streams, the arrival subscription, ingest by the consumer's
// ack floor) is delaybridge's, so the rows measure the same things.
type minimalSystem struct {
	*dbSystem
	rdb    *redis.Client
	outJS  jetstream.JetStream // the worker's publishing context (its own PubAck wait)
	workNC *nats.Conn
	cc     jetstream.ConsumeContext
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	arrived []arrival    // received, not yet parked
	parkErr atomic.Value // first park or pop error
	outErrs atomic.Int64 // failed publishes to the target (lost: the pop deleted them)
}

// arrival is a message received from IN and its receipt time (unix ms).
type arrival struct {
	m  jetstream.Msg
	at int64
}

// Keys of the minimal store (one hash tag, as a Cluster-ready store would have).
const (
	minimalZ = "{bench:min}:z"
	minimalH = "{bench:min}:h"
	// minimalTick is both the park batching window and the pop period.
	minimalTick = time.Millisecond
	// minimalMaxBatch bounds the entries of one script call (Lua unpack's stack limit).
	minimalMaxBatch = 1000
	minimalTarget   = "bench.out.w"
)

// minimalPark parks a batch: KEYS[1] sorted set, KEYS[2] hash; ARGV id, due (unix ms),
// value triples; returns the number parked.
var minimalPark = redis.NewScript(`
local z, h = {}, {}
for i = 1, #ARGV, 3 do
  z[#z + 1] = ARGV[i + 1]
  z[#z + 1] = ARGV[i]
  h[#h + 1] = ARGV[i]
  h[#h + 1] = ARGV[i + 2]
end
redis.call('ZADD', KEYS[1], unpack(z))
redis.call('HSET', KEYS[2], unpack(h))
return #ARGV / 3
`)

// minimalPop pops what is due: KEYS[1] sorted set, KEYS[2] hash; ARGV[1] the most entries
// to pop; returns id, due (unix ms), value triples (value false if the hash had none).
var minimalPop = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
if #r == 0 then return r end
local ids = {}
for i = 1, #r, 2 do ids[#ids + 1] = r[i] end
redis.call('ZREM', KEYS[1], unpack(ids))
local vals = redis.call('HMGET', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
local out = {}
for i = 1, #ids do
  out[#out + 1] = ids[i]
  out[#out + 1] = r[2 * i]
  out[#out + 1] = vals[i]
end
return out
`)

// startMinimal starts Redis (AOF fsync as delaybridge's), NATS with the same streams, and
// the minimal store's worker in this process.
func startMinimal(fsync string, capacity int) (_ *minimalSystem, err error) {
	s := &minimalSystem{dbSystem: &dbSystem{r: newRecorder(capacity)}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.rp, err = startRedis(fsync); err != nil {
		return nil, err
	}
	if err = s.startJetStream(); err != nil {
		return nil, err
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: s.rp.addr, PoolSize: 4})
	if s.workNC, err = nats.Connect(s.np.url()); err != nil {
		return nil, err
	}
	if s.outJS, err = jetstream.New(s.workNC, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { s.outErrs.Add(1) })); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.cons, err = s.outJS.CreateOrUpdateConsumer(ctx, "IN", jetstream.ConsumerConfig{Durable: "minimal",
		FilterSubject: "delay.in", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: 20000}); err != nil {
		return nil, fmt.Errorf("minimal consumer: %w", err)
	}
	if err = minimalPark.Load(ctx, s.rdb).Err(); err != nil {
		return nil, fmt.Errorf("load park script: %w", err)
	}
	if err = minimalPop.Load(ctx, s.rdb).Err(); err != nil {
		return nil, fmt.Errorf("load pop script: %w", err)
	}
	if s.cc, err = s.cons.Consume(func(m jetstream.Msg) {
		s.mu.Lock()
		s.arrived = append(s.arrived, arrival{m, time.Now().UnixMilli()})
		s.mu.Unlock()
	}, jetstream.PullMaxMessages(2000)); err != nil {
		return nil, fmt.Errorf("consume IN: %w", err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	s.cancel = wcancel
	s.wg.Go(func() { s.parkLoop(wctx) })
	s.wg.Go(func() { s.popLoop(wctx) })
	return s, nil
}

func (s *minimalSystem) name() string { return "minimal" }

// workerCPU: the minimal store's worker runs in this process (as asynq's does).
func (s *minimalSystem) workerCPU() float64 { return selfCPU() }

// parkLoop parks, every tick, what arrived since the last one: one script call per
// minimalMaxBatch messages, then the acks of the parked messages (a failed park: naks).
func (s *minimalSystem) parkLoop(ctx context.Context) {
	t := time.NewTicker(minimalTick)
	defer t.Stop()
	var batch []arrival
	args := make([]any, 0, 3*minimalMaxBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		batch, s.arrived = s.arrived, batch[:0]
		s.mu.Unlock()
		for from := 0; from < len(batch); from += minimalMaxBatch {
			chunk := batch[from:min(len(batch), from+minimalMaxBatch)]
			args = args[:0]
			for _, a := range chunk {
				args = append(args, minimalID(a.m), minimalDue(a.m, a.at), minimalValue(a.m))
			}
			err := minimalPark.EvalSha(ctx, s.rdb, []string{minimalZ, minimalH}, args...).Err()
			for _, a := range chunk {
				if err != nil {
					_ = a.m.Nak()
				} else {
					_ = a.m.Ack()
				}
			}
			if err != nil && ctx.Err() == nil {
				s.parkErr.CompareAndSwap(nil, fmt.Errorf("park: %w", err))
			}
		}
		clear(batch) // drop the references before the slice goes back to the consumer
		batch = batch[:0]
	}
}

// popLoop pops, every tick, what is due (in calls of up to minimalMaxBatch until fewer come
// back) and publishes it to its target, waiting for every PubAck before the next pop.
func (s *minimalSystem) popLoop(ctx context.Context) {
	t := time.NewTicker(minimalTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			res, err := minimalPop.EvalSha(ctx, s.rdb, []string{minimalZ, minimalH}, minimalMaxBatch).Slice()
			if err != nil {
				if ctx.Err() == nil {
					s.parkErr.CompareAndSwap(nil, fmt.Errorf("pop: %w", err))
				}
				break
			}
			for i := 0; i+2 < len(res); i += 3 {
				due, _ := res[i+1].(string)
				val, _ := res[i+2].(string)
				target, payload := minimalTarget, val
				if j := indexByte(val, '\n'); j >= 0 {
					target, payload = val[:j], val[j+1:]
				}
				m := nats.NewMsg(target)
				m.Data = []byte(payload)
				m.Header["x-delay-due"] = []string{due}
				if _, err := s.outJS.PublishMsgAsync(m); err != nil {
					s.outErrs.Add(1)
				}
			}
			if len(res) > 0 {
				select {
				case <-s.outJS.PublishAsyncComplete():
				case <-time.After(30 * time.Second):
					s.outErrs.Add(1)
				case <-ctx.Done():
					return
				}
			}
			if len(res) < 3*minimalMaxBatch {
				break
			}
		}
	}
}

func indexByte(s string, c byte) int {
	for i := range len(s) {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// minimalID is the message's source id (js:IN:<stream sequence>, as delaybridge's), so a
// redelivered message overwrites its entry.
func minimalID(m jetstream.Msg) string {
	if md, err := m.Metadata(); err == nil {
		return "js:IN:" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return "js:IN:?" + strconv.FormatInt(time.Now().UnixNano(), 10)
}

// minimalDue is the due time (unix ms) of the bench's headers: x-deliver-at, or x-delay
// from now, the receipt time (as delaybridge's receipt-time rule).
func minimalDue(m jetstream.Msg, now int64) int64 {
	h := m.Headers()
	if v := headerValue(h, "x-deliver-at"); v != "" {
		if at, err := strconv.ParseInt(v, 10, 64); err == nil {
			return at
		}
	}
	d, _ := strconv.ParseInt(headerValue(h, "x-delay"), 10, 64)
	return now + d
}

// minimalValue is what the hash keeps: the target, a newline, the payload.
func minimalValue(m jetstream.Msg) string {
	t := headerValue(m.Headers(), "x-target")
	if t == "" {
		t = minimalTarget
	}
	return t + "\n" + string(m.Data())
}

// waitIngested is delaybridge's (the consumer's ack floor), failing early on a park error.
func (s *minimalSystem) waitIngested(total int, timeout time.Duration) (time.Time, error) {
	if e := s.parkErr.Load(); e != nil {
		return time.Now(), e.(error)
	}
	t, err := s.dbSystem.waitIngested(total, timeout)
	if e := s.parkErr.Load(); err == nil && e != nil {
		err = e.(error)
	}
	if n := s.outErrs.Load(); err == nil && n > 0 {
		err = fmt.Errorf("%d publishes to the target failed", n)
	}
	return t, err
}

func (s *minimalSystem) close() {
	if s.cc != nil {
		s.cc.Stop()
	}
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
	if s.workNC != nil {
		s.workNC.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	s.dbSystem.close()
}
