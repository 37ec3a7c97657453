package kafka

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// partitionConsumer consumes one partition for one assignment of the group (until the
// partition is revoked or lost). The subscription's poller hands it the partition's
// records (feed); when it holds MaxInFlight records, the poller pauses the partition's
// fetching (only this partition's), and run resumes it once the commit point let records
// go. One goroutine (run) owns the rest of its state; the Ack and Nack of handed-out messages reach
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
	cl        *kgo.Client
	partition int32
	log       *slog.Logger

	// inMu guards inbox, held and paused, shared with the poller (feed).
	inMu   sync.Mutex
	inbox  []*kgo.Record // fed, not yet taken by run
	held   int           // records fed and not yet past the commit point
	paused bool          // fetching of the partition paused (held >= MaxInFlight)
	wake   chan struct{} // feed's signal to run (capacity 1)

	pending []*kgo.Record // taken from the inbox, not yet in the window (run only)

	genCtx   context.Context // cancelled by end
	genEnd   context.CancelFunc
	lost     atomic.Bool   // set by end(true): drain neither waits nor commits
	ended    chan struct{} // closed when run returned
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
	committed   int64 // last committed offset by this consumer; -1 none
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

func newPartitionConsumer(sub *subscription, cl *kgo.Client, partition int32) *partitionConsumer {
	genCtx, genEnd := context.WithCancel(context.Background())
	pc := &partitionConsumer{
		sub:         sub,
		cfg:         &sub.s.cfg,
		cl:          cl,
		partition:   partition,
		log:         sub.log.With("partition", partition),
		wake:        make(chan struct{}, 1),
		genCtx:      genCtx,
		genEnd:      genEnd,
		ended:       make(chan struct{}),
		events:      make(chan event, max(sub.s.cfg.MaxInFlight, 1)),
		done:        make(chan struct{}),
		committable: -1,
		committed:   -1,
	}
	pc.commitFails.Log = pc.log
	return pc
}

// feed adds records of the partition, in offset order, polled by the subscription's
// poller; when the partition holds MaxInFlight records or more, its fetching is paused
// (the records the client buffered for it are dropped and fetched again on resume).
// Called with the subscription's mu held, never after end.
func (pc *partitionConsumer) feed(recs []*kgo.Record) {
	pc.inMu.Lock()
	pc.inbox = append(pc.inbox, recs...)
	pc.held += len(recs)
	if pc.held >= pc.cfg.MaxInFlight && !pc.paused {
		pc.paused = true
		pc.cl.PauseFetchPartitions(map[string][]int32{pc.sub.topic: {pc.partition}})
		pc.log.Debug("kafka partition paused", "held", pc.held)
	}
	pc.inMu.Unlock()
	select {
	case pc.wake <- struct{}{}:
	default:
	}
}

// let accounts for n records past the commit point: below MaxInFlight, a paused
// partition is fetched again.
func (pc *partitionConsumer) let(n int) {
	pc.inMu.Lock()
	pc.held -= n
	if pc.paused && pc.held < pc.cfg.MaxInFlight {
		pc.paused = false
		pc.cl.ResumeFetchPartitions(map[string][]int32{pc.sub.topic: {pc.partition}})
		pc.log.Debug("kafka partition resumed", "held", pc.held)
	}
	pc.inMu.Unlock()
}

// end ends the consumer's assignment: run drains (lost: gives up at once) and returns,
// then ended is closed.
func (pc *partitionConsumer) end(lost bool) {
	if lost {
		pc.lost.Store(true)
	}
	pc.genEnd()
}

// take moves the next record into the window as the fresh entry, when there is room
// and none is fresh.
func (pc *partitionConsumer) take() {
	if pc.fresh != nil || len(pc.window) >= pc.cfg.MaxInFlight {
		return
	}
	if len(pc.pending) == 0 {
		pc.inMu.Lock()
		pc.pending, pc.inbox = pc.inbox, pc.pending[:0]
		pc.inMu.Unlock()
		if len(pc.pending) == 0 {
			return
		}
	}
	km := pc.pending[0]
	pc.pending[0] = nil
	pc.pending = pc.pending[1:]
	e := &entry{offset: km.Offset}
	if pc.sub.fast != nil {
		e.rec = newRecord(km, pc.cfg.UUIDHeader)
	} else {
		e.msg = fromKafka(km, pc.cfg.UUIDHeader)
	}
	pc.window = append(pc.window, e)
	pc.fresh = e
}

// run consumes the partition until end is called (rebalance, or the group is left),
// then drains and commits. From runCtx's end (the subscription stops) until then, it
// hands nothing out.
func (pc *partitionConsumer) run(runCtx context.Context) {
	defer close(pc.ended)
	defer pc.genEnd()
	pc.log.Debug("kafka partition assigned")

	commitTick := time.NewTicker(pc.cfg.CommitInterval)
	defer commitTick.Stop()
	handing := true
	for {
		var outCh chan<- *message.Message
		var fastCh chan<- *headers.Received
		if handing {
			pc.take()
			pc.prepareOffer(runCtx)
			switch {
			case pc.offer == nil:
			case pc.sub.fast != nil:
				fastCh = pc.sub.fast
			default:
				outCh = pc.sub.out
			}
		}
		var runDone <-chan struct{}
		if handing {
			runDone = runCtx.Done()
		}
		select {
		case <-pc.genCtx.Done():
			pc.drain()
			return
		case <-runDone:
			handing = false
			pc.withdrawOffer()
		case <-pc.wake:
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
		h(pc.sub.topic, int(pc.partition), e.offset, ev.kind == evAck)
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
	if n > 0 {
		pc.let(n)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), coordinatorTimeout)
	defer cancel()
	var err error
	pc.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{pc.sub.topic: {pc.partition: {Epoch: -1, Offset: off}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, cerr error) {
			err = cerr
			if resp == nil {
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					err = errors.Join(err, kerr.ErrorForCode(p.ErrorCode))
				}
			}
		})
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if h := pc.sub.s.hooks.committed; h != nil {
		h(pc.sub.topic, int(pc.partition), off, err)
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
//
// A lost partition (end(true)) neither waits nor commits: another member may own it
// already.
func (pc *partitionConsumer) drain() {
	pc.withdrawOffer()
	lost := pc.lost.Load()
	if pc.outstanding > 0 && !lost {
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
	if !lost {
		pc.handlePending(false)
		pc.commit()
	}
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
