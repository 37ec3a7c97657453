package nats

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/headers"
)

// SubscribeReceived is [Subscriber.Subscribe] for a receiver that takes messages as
// headers.Received (ingress's fast path), for a topic that the configured stream
// captures; ok is false (nothing subscribed, nil error) for any other topic, which
// Subscribe serves through core NATS. It blocks until the consumer is created or updated.
//
// The channel is closed when ctx is cancelled or Close is called. The receiver settles
// every message once: Received.Ack sends the JetStream ack (its reply argument is
// ignored: JetStream messages are not requests), Received.Nack a Nak, at once, from the
// caller's goroutine; both are no-ops after Close (the message is redelivered after
// AckWait). Until then the message is reported in progress as with Subscribe. A message
// costs no context, timer, goroutine or watermill message: what the adapter allocates per
// message is one struct (holding the Received, up to 8 headers, its progress entry) and
// the source id string; the rest is nats.go's.
//
// Fails when the stream does not exist (errors.Is [ErrStreamNotFound]), when the consumer
// cannot be created, or after Close ([ErrClosed]).
func (s *Subscriber) SubscribeReceived(ctx context.Context, topic string) (<-chan *headers.Received, bool, error) {
	if s.cfg.Stream == "" {
		return nil, false, nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, false, fmt.Errorf("subscribe to %s: subscriber %w", topic, ErrClosed)
	}
	s.wg.Add(1)
	s.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.closeCtx, cancel)
	fail := func() {
		stopOnClose()
		cancel()
		s.wg.Done()
	}
	sctx, cancelSetup := context.WithTimeout(runCtx, setupTimeout)
	defer cancelSetup()
	captured, err := s.captured(sctx, topic)
	if err != nil || !captured {
		fail()
		if err != nil {
			return nil, false, fmt.Errorf("subscribe to %s: %w", topic, err)
		}
		return nil, false, nil
	}
	cons, log, err := s.createConsumer(sctx, topic)
	if err != nil {
		fail()
		return nil, false, fmt.Errorf("subscribe to %s: %w", topic, err)
	}
	out := make(chan *headers.Received)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer stopOnClose()
		s.runJetStream(runCtx, jsOut{fast: out}, topic, cons, log)
	}()
	return out, true, nil
}

// jsOut is where a JetStream subscription hands out its messages: watermill messages on
// wm (Subscribe; each settled by the settling goroutine through queue) or, on the fast
// path, headers.Received on fast (SubscribeReceived; each settles itself).
type jsOut struct {
	wm    chan *message.Message
	queue chan<- pending
	fast  chan *headers.Received
}

// hand hands m out; false when ctx ended first (m was not handed out).
func (o jsOut) hand(ctx context.Context, m *jsMsg) bool {
	if o.fast != nil {
		select {
		case o.fast <- &m.Received:
			return true
		case <-ctx.Done():
			return false
		}
	}
	wm := m.watermill()
	msgCtx, cancelMsg := context.WithCancel(ctx)
	wm.SetContext(msgCtx)
	select {
	case o.wm <- wm:
		o.queue <- pending{wm: wm, cancel: cancelMsg, tr: m.tr, onAck: m.jm.Ack, onNack: m.jm.Nak}
		return true
	case <-ctx.Done():
		cancelMsg()
		return false
	}
}

// close closes the channel of o.
func (o jsOut) close() {
	if o.fast != nil {
		close(o.fast)
		return
	}
	close(o.wm)
}

// jsSub is what the messages of one JetStream subscription share.
type jsSub struct {
	sem    chan struct{}   // a count per message fetched and not yet settled
	closed context.Context // the Subscriber's: done on Close
	log    *slog.Logger
}

// jsMsg is a JetStream message taken out of the client's buffer, as handed out on the
// fast path (its Received, settled by itself) and the source of Subscribe's watermill
// message. One allocation holds it all.
type jsMsg struct {
	headers.Received
	jm      jetstream.Msg
	sub     *jsSub
	tr      *tracked // &trk, nil when progress reports are off
	trk     tracked
	settled atomic.Bool
	hbuf    [8]headers.Header // Headers' backing array for up to 8 headers
}

// newJSMsg reads jm: its headers (as fromNATS does), and its stream, stream sequence and
// time from its ack subject (as jetstream.Msg.Metadata does, without allocating).
func newJSMsg(jm jetstream.Msg, sub *jsSub) *jsMsg {
	m := &jsMsg{jm: jm, sub: sub}
	m.Headers, m.ID = appendHeaders(m.hbuf[:0], jm.Headers())
	m.Payload = jm.Data()
	m.Settle = m
	if stream, seq, ns, ok := parseJSReply(jm.Reply()); ok {
		m.SourceID, m.SourceTime = sourceIDAndTime(stream, seq, ns)
	} else {
		sub.log.Debug("jetstream message without metadata", "reply", jm.Reply())
	}
	return m
}

// Ack sends the JetStream ack of m (reply is ignored) and stops its progress reports;
// only the first Ack or Nack counts, and none after Close.
func (m *jsMsg) Ack(string) { m.settle(true) }

// Nack sends a Nak for m (JetStream redelivers it at once); as Ack otherwise.
func (m *jsMsg) Nack() { m.settle(false) }

func (m *jsMsg) settle(ack bool) {
	if !m.settled.CompareAndSwap(false, true) {
		return
	}
	m.tr.done()
	if m.sub.closed.Err() == nil { // after Close: redelivered after AckWait, as Subscribe's
		var err error
		if ack {
			err = m.jm.Ack()
		} else {
			err = m.jm.Nak()
		}
		if err != nil {
			m.sub.log.Debug("jetstream settle", "ack", ack, "error", err)
		}
	}
	<-m.sub.sem
}

// handBack naks m, which was fetched and never handed out, and frees its count.
func (m *jsMsg) handBack() {
	m.settled.Store(true)
	m.tr.done()
	nak(m.jm, m.sub.log)
	<-m.sub.sem
}

// watermill is m as Subscribe hands it out (fromNATS's message, with the source id and
// time in the metadata).
func (m *jsMsg) watermill() *message.Message {
	if m.SourceID == "" {
		return watermillMessage(m.ID, m.Headers, m.Payload)
	}
	return watermillMessage(m.ID, m.Headers, m.Payload,
		headers.MetaSourceID, m.SourceID, headers.MetaSourceTime, m.SourceTime)
}

// Token positions in a JetStream ack subject, as nats.go's parser numbers them:
// $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
// seq>.<time>.<pending>[.<token>] (v2, at least 11 tokens), or v1, 9 tokens, without
// domain and account hash.
const (
	ackStreamPos    = 4
	ackStreamSeqPos = 7
	ackTimePos      = 9
	ackPendingPos   = 10
)

// parseJSReply reads the stream, stream sequence and time (unix ns) from the ack
// subject of a JetStream message, as jetstream.Msg.Metadata does (same checks, numbers
// parsed as nats.go's parser.ParseNum: 0 when not decimal), in one pass over the subject
// and without allocating (strings.Cut per token cost ~5 % of the park CPU).
func parseJSReply(subject string) (stream string, seq, ns uint64, ok bool) {
	if !strings.HasPrefix(subject, "$JS.ACK.") {
		return "", 0, 0, false
	}
	var dots [ackPendingPos]int // where each of the first tokens ends
	n := 0                      // dots in subject
	for i := 0; i < len(subject); i++ {
		if subject[i] == '.' {
			if n < len(dots) {
				dots[n] = i
			}
			n++
		}
	}
	tokens := n + 1
	if tokens < 9 || (tokens > 9 && tokens < 11) {
		return "", 0, 0, false
	}
	shift := 0
	if tokens == 9 { // v1: no domain, no account hash
		shift = 2
	}
	token := func(pos int) string { // pos as in v2; only positions before the last token
		k := pos - shift
		return subject[dots[k-1]+1 : dots[k]]
	}
	return token(ackStreamPos), parseNum(token(ackStreamSeqPos)), parseNum(token(ackTimePos)), true
}

// parseNum is nats.go's parser.ParseNum: a decimal number, 0 when d has a non-digit.
func parseNum(d string) (n uint64) {
	for i := 0; i < len(d); i++ {
		c := d[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

// sourceIDAndTime returns headers.MetaSourceID "js:<stream>:<seq>" and
// headers.MetaSourceTime (ns as unix ms, decimal) of a JetStream message, as two parts of
// one string (one allocation).
func sourceIDAndTime(stream string, seq, ns uint64) (id, ms string) {
	var num [20]byte
	var b strings.Builder
	b.Grow(len("js::") + len(stream) + 2*len(num))
	b.WriteString("js:")
	b.WriteString(stream)
	b.WriteByte(':')
	b.Write(strconv.AppendUint(num[:0], seq, 10))
	idLen := b.Len()
	b.Write(strconv.AppendInt(num[:0], int64(ns)/1e6, 10))
	s := b.String()
	return s[:idLen], s[idLen:]
}
