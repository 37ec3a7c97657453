package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
)

// asynqSystem is the peer baseline: asynq scheduled tasks on its own spawned redis-server
// (same configuration as delaybridge's), client and server in this process.
type asynqSystem struct {
	rp       *redisProc
	client   *asynq.Client
	srv      *asynq.Server
	r        *recorder
	enqueued atomic.Int64
	workers  int
}

// asynq knobs: lower than its defaults (5 s forwarder, 1 s idle poll) so that its lateness
// is comparable; recorded in docs/benchmarks.md.
const (
	asynqConcurrency   = 64
	asynqDelayedCheck  = 100 * time.Millisecond
	asynqTaskCheck     = 10 * time.Millisecond
	asynqEnqueueWorker = 64
)

func startAsynq(fsync string, capacity int) (_ *asynqSystem, err error) {
	s := &asynqSystem{r: newRecorder(capacity), workers: asynqEnqueueWorker}
	if s.rp, err = startRedis(fsync); err != nil {
		return nil, err
	}
	opt := asynq.RedisClientOpt{Addr: s.rp.addr, PoolSize: asynqEnqueueWorker + asynqConcurrency + 16}
	s.client = asynq.NewClient(opt)
	s.srv = asynq.NewServer(opt, asynq.Config{
		Concurrency:              asynqConcurrency,
		DelayedTaskCheckInterval: asynqDelayedCheck,
		TaskCheckInterval:        asynqTaskCheck,
		LogLevel:                 asynq.ErrorLevel,
	})
	h := asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		now := time.Now().UnixNano()
		p := t.Payload()
		if len(p) < 8 {
			s.r.bad.Add(1)
			return nil
		}
		s.r.arrive(now, int64(binary.BigEndian.Uint64(p)))
		return nil
	})
	if err = s.srv.Start(h); err != nil {
		s.client.Close()
		s.rp.stop()
		return nil, err
	}
	return s, nil
}

func (s *asynqSystem) name() string             { return "asynq" }
func (s *asynqSystem) rec() *recorder           { return s.r }
func (s *asynqSystem) redisNodes() []*redisProc { return []*redisProc{s.rp} }
func (s *asynqSystem) workerCPU() float64 {
	return selfCPU()
}

func (s *asynqSystem) send(n int, gen func(int) sched, rate float64) error {
	start := time.Now()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			payload := make([]byte, payloadSize)
			copy(payload, benchPayload)
			for {
				i := int(next.Add(1) - 1)
				if i >= n || firstErr.Load() != nil {
					return
				}
				if rate > 0 {
					if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > time.Millisecond {
						time.Sleep(wait)
					}
				}
				sc := gen(i)
				var opt asynq.Option
				var due time.Time
				if sc.abs {
					due, opt = sc.at, asynq.ProcessAt(sc.at)
				} else {
					due, opt = time.Now().Add(sc.delay), asynq.ProcessIn(sc.delay)
				}
				binary.BigEndian.PutUint64(payload, uint64(due.UnixNano()))
				task := asynq.NewTask("bench", payload, asynq.MaxRetry(3))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := s.client.EnqueueContext(ctx, task, opt)
				cancel()
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("enqueue %d: %w", i, err))
					return
				}
				s.enqueued.Add(1)
			}
		})
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return e.(error)
	}
	return nil
}

// waitIngested: Enqueue returns once Redis has the task, so send's return is the ingest.
func (s *asynqSystem) waitIngested(total int, _ time.Duration) (time.Time, error) {
	if got := s.enqueued.Load(); got < int64(total) {
		return time.Now(), fmt.Errorf("enqueued %d of %d", got, total)
	}
	return time.Now(), nil
}

func (s *asynqSystem) close() {
	if s.srv != nil {
		s.srv.Shutdown()
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.rp != nil {
		s.rp.stop()
	}
}
