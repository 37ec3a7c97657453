package kafka

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// partitionConsumer consumes one partition for one generation of the group. One
// goroutine (run) owns all of its state; the Ack and Nack of handed-out messages reach
// it as events: a watermill message's through one watcher goroutine per message
// (Subscribe), a headers.Received's sent by its Ack or Nack itself (SubscribeReceived).
// The events channel holds MaxInFlight: every entry of the window has at most one event
// under way (its Ack or Nack while handed out, its resend while nacked), so a sender
// never waits for run.
//
// State: window holds, in offset order, every record fetched and not yet covered by
// the commit point: queued for hand-out, handed out, nacked and waiting to be handed out
// again, or acked behind one that is not. The commit point (committable) is the offset
// after the longest acked prefix; the acked records of that prefix leave the window.
// Offsets may have gaps (compaction, transaction markers): contiguity is over the
// records fetched, not over integers.
type partitionConsumer struct {
	sub       *subscription
	cfg       *SubscriberConfig
	gen       *kafkago.Generation
	partition int
	start     int64 // assigned offset: committed, or FirstOffset/LastOffset
	log       *slog.Logger

	events   chan event
	done     chan struct{} // closed when run ends: watchers and timers give up
	watchers sync.WaitGroup

	window      []*entry
	retry       []*entry // nacked, to be handed out again first
	fresh       *entry   // fetched, not yet handed out
	offer       *entry   // the entry of the prepared delivery, if any
	offerMsg    *message.Message
	offerRec    *received // the prepared delivery on the fast path
	offerCancel context.CancelFunc
	outstanding int   // handed out, awaiting Ack or Nack
	committable int64 // offset after the acked prefix; -1 before any
	committed   int64 // last committed offset; -1 unknown
	lastCommit  time.Time
	commitFails backoff.Streak // failed commits of the current run (Warn once)
}

type entry struct {
	offset   int64
	msg      *message.Message // pristine; each delivery is a copy. nil once acked
	rec      *record          // the same on the fast path (each delivery a received)
	acked    bool
	resend   *time.Timer // pending NackResendDelay
	handedAt int         // deliveries so far
}

type eventKind int

const (
	evAck eventKind = iota
	evNack
	evResend
)

type event struct {
	e    *entry
	kind eventKind
}

func newPartitionConsumer(sub *subscription, gen *kafkago.Generation, pa kafkago.PartitionAssignment) *partitionConsumer {
	pc := &partitionConsumer{
		sub:         sub,
		cfg:         &sub.s.cfg,
		gen:         gen,
		partition:   pa.ID,
		start:       pa.Offset,
		log:         sub.log.With("partition", pa.ID, "generation", gen.ID),
		events:      make(chan event, max(sub.s.cfg.MaxInFlight, 1)),
		done:        make(chan struct{}),
		committable: -1,
		committed:   -1,
	}
	if pa.Offset >= 0 {
		pc.committed = pa.Offset
	}
	pc.commitFails.Log = pc.log
	return pc
}

// run consumes the partition until genCtx ends (rebalance, or the group is closed),
// then drains and commits. From runCtx's end (the subscription stops) until then, it
// hands nothing out.
func (pc *partitionConsumer) run(runCtx, genCtx context.Context) {
	fetched := make(chan kafkago.Message)
	stopReader := pc.startReader(runCtx, fetched)
	pc.log.Debug("kafka partition assigned", "offset", pc.start)

	commitTick := time.NewTicker(pc.cfg.CommitInterval)
	defer commitTick.Stop()
	handing := true
	for {
		var outCh chan<- *message.Message
		var fastCh chan<- *headers.Received
		if handing {
			pc.prepareOffer(runCtx)
			switch {
			case pc.offer == nil:
			case pc.sub.fast != nil:
				fastCh = pc.sub.fast
			default:
				outCh = pc.sub.out
			}
		}
		var fetchCh <-chan kafkago.Message
		if handing && pc.fresh == nil && len(pc.window) < pc.cfg.MaxInFlight {
			fetchCh = fetched
		}
		var runDone <-chan struct{}
		if handing {
			runDone = runCtx.Done()
		}
		select {
		case <-genCtx.Done():
			stopReader()
			pc.drain()
			return
		case <-runDone:
			handing = false
			pc.withdrawOffer()
			stopReader()
		case km := <-fetchCh:
			e := &entry{offset: km.Offset}
			if pc.sub.fast != nil {
				e.rec = newRecord(&km, pc.cfg.UUIDHeader)
			} else {
				e.msg = fromKafka(&km, pc.cfg.UUIDHeader)
			}
			pc.window = append(pc.window, e)
			pc.fresh = e
		case outCh <- pc.offerMsg:
			pc.handedOut()
		case fastCh <- pc.offerRecReceived():
			pc.handedOut()
		case ev := <-pc.events:
			pc.handle(ev, handing)
			pc.handlePending(handing)
			pc.maybeCommit()
		case <-commitTick.C:
			pc.maybeCommit()
		}
	}
}

// startReader starts a reader of the partition at pc.start that sends its records on
// fetched until runCtx ends or the returned stop is called; stop closes the reader and
// waits for its fetcher (safe to call more than once).
func (pc *partitionConsumer) startReader(runCtx context.Context, fetched chan<- kafkago.Message) (stop func()) {
	rc := kafkago.ReaderConfig{
		Brokers:        pc.cfg.Brokers,
		Topic:          pc.sub.topic,
		Partition:      pc.partition,
		Dialer:         pc.sub.s.dialer,
		MaxWait:        fetchMaxWait,
		IsolationLevel: kafkago.ReadCommitted,
		Logger:         kafkaLogger(pc.log),
		ErrorLogger:    kafkaLogger(pc.log),
	}
	fetchCtx, stopFetch := context.WithCancel(runCtx)
	fetchDone := make(chan struct{})
	var reader *kafkago.Reader
	if err := rc.Validate(); err != nil { // NewReader panics on an invalid config
		pc.log.Error("kafka partition reader config", "error", err)
		close(fetchDone)
	} else {
		reader = kafkago.NewReader(rc)
		if err := reader.SetOffset(pc.start); err != nil {
			pc.log.Error("kafka partition reader offset", "offset", pc.start, "error", err)
		}
		go func() {
			defer close(fetchDone)
			pc.fetch(fetchCtx, reader, fetched)
		}()
	}
	return sync.OnceFunc(func() {
		stopFetch()
		if reader != nil {
			if err := reader.Close(); err != nil {
				pc.log.Debug("close kafka partition reader", "error", err)
			}
		}
		<-fetchDone
	})
}

// fetch reads records from r until ctx is done and sends them on fetched.
func (pc *partitionConsumer) fetch(ctx context.Context, r *kafkago.Reader, fetched chan<- kafkago.Message) {
	streak := backoff.Streak{Log: pc.log} // logged once at Warn, then quietly retried
	for {
		km, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return
			}
			streak.Failed(ctx, "kafka fetch, retrying", "error", err)
			if !backoff.Sleep(ctx, fetchErrorPause) {
				return
			}
			continue
		}
		if km.Value == nil { // null or empty: kafka-go cannot tell; ask the broker
			null, err := pc.sub.s.nullValue(ctx, km.Topic, km.Partition, km.Offset)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				streak.Failed(ctx, "kafka fetch, retrying", "error", err)
				if !backoff.Sleep(ctx, fetchErrorPause) || r.SetOffset(km.Offset) != nil {
					return
				}
				continue
			}
			if !null {
				km.Value = []byte{}
			}
		}
		streak.Reset()
		select {
		case fetched <- km:
		case <-ctx.Done():
			return
		}
	}
}

// prepareOffer readies the next delivery, a nacked record first, once; it stays
// prepared until handed out.
func (pc *partitionConsumer) prepareOffer(runCtx context.Context) {
	if pc.offer != nil {
		return
	}
	var e *entry
	switch {
	case len(pc.retry) > 0:
		e = pc.retry[0]
		pc.retry[0] = nil
		pc.retry = pc.retry[1:]
	case pc.fresh != nil:
		e = pc.fresh
		pc.fresh = nil
	default:
		return
	}
	if e.rec != nil {
		pc.offer, pc.offerRec = e, newReceived(pc, e)
		return
	}
	msg := e.msg.Copy()
	ctx, cancel := context.WithCancel(runCtx)
	msg.SetContext(ctx)
	pc.offer, pc.offerMsg, pc.offerCancel = e, msg, cancel
}

// offerRecReceived is the prepared fast-path delivery as handed out (nil when none).
func (pc *partitionConsumer) offerRecReceived() *headers.Received {
	if pc.offerRec == nil {
		return nil
	}
	return &pc.offerRec.Received
}

// withdrawOffer drops the prepared delivery; its record stays unacked in the window,
// so nothing at or after it is committed.
func (pc *partitionConsumer) withdrawOffer() {
	if pc.offer == nil {
		return
	}
	if pc.offerCancel != nil {
		pc.offerCancel()
	}
	pc.offer, pc.offerMsg, pc.offerRec, pc.offerCancel = nil, nil, nil, nil
}

// handedOut records that the prepared delivery was taken; a watermill message gets its
// watcher (a fast-path one reports its own Ack or Nack).
func (pc *partitionConsumer) handedOut() {
	e, msg, cancel := pc.offer, pc.offerMsg, pc.offerCancel
	pc.offer, pc.offerMsg, pc.offerRec, pc.offerCancel = nil, nil, nil, nil
	e.handedAt++
	pc.outstanding++
	if pc.log.Enabled(context.Background(), slog.LevelDebug) {
		pc.log.Debug("kafka message handed out", "offset", e.offset, "delivery", e.handedAt)
	}
	if msg == nil {
		return
	}
	pc.watchers.Add(1)
	go pc.watch(e, msg, cancel)
}

// watch waits for msg's Ack or Nack and reports it, unless the partition is released
// first. It cancels the message's context either way.
func (pc *partitionConsumer) watch(e *entry, msg *message.Message, cancel context.CancelFunc) {
	defer pc.watchers.Done()
	defer cancel()
	ev := event{e: e}
	select {
	case <-msg.Acked():
		ev.kind = evAck
	case <-msg.Nacked():
		ev.kind = evNack
	case <-pc.done:
		return
	}
	select {
	case pc.events <- ev:
	case <-pc.done:
	}
}

// handle applies one event. With handing false (the subscription is stopping), a
// nacked record is not handed out again.
func (pc *partitionConsumer) handle(ev event, handing bool) {
	e := ev.e
	switch ev.kind {
	case evAck:
		pc.outstanding--
		e.acked = true
		e.msg, e.rec = nil, nil
		pc.advance()
	case evNack:
		pc.outstanding--
		if handing {
			pc.scheduleResend(e)
		}
	case evResend:
		e.resend = nil
		if handing {
			pc.retry = append(pc.retry, e)
		}
	}
	if ev.kind != evResend && pc.log.Enabled(context.Background(), slog.LevelDebug) {
		pc.log.Debug("kafka message resolved", "offset", e.offset, "acked", ev.kind == evAck)
	}
	if h := pc.sub.s.hooks.resolved; h != nil && ev.kind != evResend {
		h(pc.sub.topic, pc.partition, e.offset, ev.kind == evAck)
	}
}

// handlePending applies the events that are ready without waiting, so that one commit
// covers them all.
func (pc *partitionConsumer) handlePending(handing bool) {
	for range pc.cfg.MaxInFlight {
		select {
		case ev := <-pc.events:
			pc.handle(ev, handing)
		default:
			return
		}
	}
}

func (pc *partitionConsumer) scheduleResend(e *entry) {
	pc.watchers.Add(1)
	e.resend = time.AfterFunc(pc.cfg.NackResendDelay, func() {
		defer pc.watchers.Done()
		select {
		case pc.events <- event{e: e, kind: evResend}:
		case <-pc.done:
		}
	})
}

// advance moves the commit point over the acked prefix of the window.
func (pc *partitionConsumer) advance() {
	n := 0
	for n < len(pc.window) && pc.window[n].acked {
		pc.committable = pc.window[n].offset + 1
		pc.window[n] = nil // let the entry go
		n++
	}
	pc.window = pc.window[n:]
}

// maybeCommit commits when the commit point moved and the last attempt is at least
// CommitInterval ago; otherwise the ticker comes back to it.
func (pc *partitionConsumer) maybeCommit() {
	if pc.committable > pc.committed && time.Since(pc.lastCommit) >= pc.cfg.CommitInterval {
		pc.commit()
	}
}

// commit commits the commit point when it moved, synchronously, in this generation
// (the coordinator refuses it if the generation is over). A failure is retried on a
// later event or tick.
func (pc *partitionConsumer) commit() {
	if pc.committable <= pc.committed {
		return
	}
	pc.lastCommit = time.Now()
	off := pc.committable
	err := pc.gen.CommitOffsets(map[string]map[int]int64{pc.sub.topic: {pc.partition: off}})
	if h := pc.sub.s.hooks.committed; h != nil {
		h(pc.sub.topic, pc.partition, off, err)
	}
	if err != nil {
		pc.commitFails.Failed(context.Background(), "kafka offset commit", "offset", off, "error", err) // Warn once per run
		return
	}
	pc.commitFails.Reset()
	pc.committed = off
	pc.log.Debug("kafka offset committed", "offset", off)
}

// drain releases the partition: nothing more is handed out; the Acks and Nacks of the
// messages handed out are awaited up to DrainTimeout; the contiguous acks are
// committed. Later Acks are ignored, and the contexts of the messages still out are
// cancelled.
func (pc *partitionConsumer) drain() {
	pc.withdrawOffer()
	if pc.outstanding > 0 {
		timer := time.NewTimer(pc.cfg.DrainTimeout)
	wait:
		for pc.outstanding > 0 {
			select {
			case ev := <-pc.events:
				pc.handle(ev, false)
			case <-timer.C:
				break wait
			}
		}
		timer.Stop()
	}
	pc.handlePending(false)
	pc.commit()
	if pc.outstanding > 0 {
		pc.log.Warn("kafka partition released with messages neither acked nor nacked: they will be redelivered",
			"count", pc.outstanding, "committed", pc.committed)
	}
	close(pc.done)
	for _, e := range pc.window {
		if e.resend != nil && e.resend.Stop() {
			pc.watchers.Done() // its function will not run
		}
	}
	pc.watchers.Wait()
	pc.log.Debug("kafka partition released", "committed", pc.committed)
}
