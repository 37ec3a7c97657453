package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// NATSConfig says where the dead letters are and where they go.
type NATSConfig struct {
	// DLQSubject is the dead-letter subject (BRIDGE_DLQ_SUBJECT); a JetStream stream must
	// capture it.
	DLQSubject string
	// Ingress is the bridge's ingress subject (BRIDGE_NATS_SUBJECT).
	Ingress string
	// IngressStream, when set (BRIDGE_NATS_STREAM), is the stream the bridge consumes the
	// ingress subject from: letters are published through JetStream and its PubAck confirms
	// them. Empty: the bridge consumes core NATS, and a letter is sent as a request that the
	// bridge answers once it parked it.
	IngressStream string
	// Timeout bounds each publish or request (default 10s).
	Timeout time.Duration
}

// fetchWait is how long one fetch waits for the next letters.
const fetchWait = 2 * time.Second

// NATS redrives the dead letters that the stream capturing cfg.DLQSubject holds when it
// starts. It blocks until every one of them was looked at (or opts.Max), a publish was not
// confirmed (the error says which letter; it stays), or ctx ends. The counts are valid
// with an error too.
func NATS(ctx context.Context, nc *natsgo.Conn, cfg NATSConfig, opts Options) (Counts, error) {
	counts := Counts{}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return counts, fmt.Errorf("jetstream: %w", err)
	}
	stream, err := dlqStream(ctx, js, cfg.DLQSubject)
	if err != nil {
		return counts, err
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     cfg.DLQSubject,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           time.Hour, // nothing comes again during the run
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: 5 * time.Minute,
	})
	if err != nil {
		return counts, fmt.Errorf("read the dead letters of stream %s: %w", stream.CachedInfo().Config.Name, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return counts, fmt.Errorf("dead-letter consumer: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stream.DeleteConsumer(dctx, info.Name)
	}()
	r := natsRun{js: js, nc: nc, stream: stream, cfg: cfg, opts: opts, counts: counts}
	return counts, r.all(ctx, cons, int(info.NumPending))
}

// dlqStream is the stream that captures subject.
func dlqStream(ctx context.Context, js jetstream.JetStream, subject string) (jetstream.Stream, error) {
	name, err := js.StreamNameBySubject(ctx, subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("no JetStream stream captures the dead-letter subject %q: dead letters published on core NATS are not kept, so there is nothing to redrive", subject)
	}
	if err != nil {
		return nil, fmt.Errorf("find the stream of %q: %w", subject, err)
	}
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return s, nil
}

// natsRun is one NATS redrive.
type natsRun struct {
	js     jetstream.JetStream
	nc     *natsgo.Conn
	stream jetstream.Stream
	cfg    NATSConfig
	opts   Options
	counts Counts
}

// all looks at the pending letters, batch by batch.
func (r *natsRun) all(ctx context.Context, cons jetstream.Consumer, pending int) error {
	if r.opts.Max > 0 {
		pending = min(pending, r.opts.Max)
	}
	for seen := 0; seen < pending; {
		batch, err := cons.Fetch(min(pending-seen, 100), jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			return fmt.Errorf("fetch dead letters: %w", err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			if err := r.one(ctx, msg); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsgo.ErrTimeout) {
			return fmt.Errorf("fetch dead letters: %w", err)
		}
		if n == 0 {
			return nil // fewer than announced: deleted or expired meanwhile
		}
		seen += n
	}
	return nil
}

// one redrives or leaves one letter.
func (r *natsRun) one(ctx context.Context, msg jetstream.Msg) error {
	h := fromNATS(msg.Headers())
	reason, redrive := judge(h, r.opts, r.cfg.IngressStream == "")
	t := r.counts.of(reason)
	switch {
	case !redrive:
		t.Left++
		return nil
	case r.opts.DryRun:
		t.Selected++
		return nil
	}
	meta, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("dead letter metadata: %w", err)
	}
	seq := meta.Sequence.Stream
	out := &natsgo.Msg{Subject: r.cfg.Ingress, Header: toNATS(republished(h)), Data: msg.Data()}
	refused, err := r.publish(ctx, out, seq)
	if err != nil {
		return fmt.Errorf("dead letter %d (%s) not redriven, it stays: %w", seq, reason, err)
	}
	t.Selected++
	if refused {
		t.Refused++
	} else {
		t.Redriven++
	}
	return r.letGo(ctx, msg, seq)
}

// publish sends out to the ingress and waits for its confirmation. Through core NATS the
// bridge's reply decides: {"id","due"} is parked; an error reply was sent only after the
// bridge had dead-lettered the message anew (refused: the old letter may go), except a
// not_replicated one, which kept nothing (an error: the letter stays).
func (r *natsRun) publish(ctx context.Context, out *natsgo.Msg, seq uint64) (refused bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if r.cfg.IngressStream != "" {
		id := "redrive:" + r.stream.CachedInfo().Config.Name + ":" + strconv.FormatUint(seq, 10)
		_, err := r.js.PublishMsg(pctx, out, jetstream.WithMsgID(id), jetstream.WithExpectStream(r.cfg.IngressStream))
		return false, err
	}
	reply, err := r.nc.RequestMsgWithContext(pctx, out)
	if err != nil {
		return false, err
	}
	var answer struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &answer); err != nil {
		return false, fmt.Errorf("unexpected reply %q: %w", reply.Data, err)
	}
	switch {
	case answer.Error == "":
		return false, nil
	case strings.HasPrefix(answer.Error, contract.ReasonNotReplicated):
		return false, fmt.Errorf("the bridge could not store it durably: %s", answer.Error)
	}
	return true, nil
}

// letGo acks a redriven letter and deletes it from its stream (a work-queue stream has
// dropped it on the ack already).
func (r *natsRun) letGo(ctx context.Context, msg jetstream.Msg, seq uint64) error {
	actx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		return fmt.Errorf("dead letter %d was redriven, but its ack failed (it stays: a next run sends it again): %w", seq, err)
	}
	err := r.stream.DeleteMsg(actx, seq)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("dead letter %d was redriven, but could not be deleted from its stream (it stays: a next run sends it again; the stream must allow deletes): %w", seq, err)
	}
	return nil
}

// fromNATS turns NATS headers into a header list (keys sorted: a NATS header map has no
// order; values of one key keep theirs).
func fromNATS(h natsgo.Header) headers.List {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out headers.List
	for _, k := range keys {
		for _, v := range h[k] {
			out.Add(k, v)
		}
	}
	return out
}

// toNATS turns a header list into NATS headers, names kept as written.
func toNATS(l headers.List) natsgo.Header {
	h := natsgo.Header{}
	for _, f := range l {
		h[f.Key] = append(h[f.Key], f.Value)
	}
	return h
}
