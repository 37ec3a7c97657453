package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/contract"
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

// claimBucket is the JetStream key-value bucket in which runs claim letters, so that two
// runs at once never send the same letter; a claim expires after claimTTL (a run that
// died holding it only delays the letter).
const (
	claimBucket = "delaybridge_redrive"
	claimTTL    = time.Minute
)

// NATS redrives the dead letters that the stream capturing cfg.DLQSubject holds when it
// starts: those up to the stream's last sequence at the start, read one by one by
// sequence (no consumer: letters left hold nothing, and the end is that sequence, never
// an empty read). Each selected letter is claimed (bucket claimBucket), sent to the
// ingress, and deleted only after the ingress confirmed it: a JetStream PubAck that is
// not a duplicate, or the bridge's reply (parked; or refused, once its new dead letter is
// seen in the stream). It then watches the stream for letters refused again
// (opts.Wait). It blocks until every letter was looked at (or opts.Max), a publish was
// not confirmed (the error says which letter; it stays), or ctx ends. The counts are
// valid with an error too.
func NATS(ctx context.Context, nc *natsgo.Conn, cfg NATSConfig, opts Options) (Counts, error) {
	r, info, err := newNATSRun(ctx, nc, cfg, opts)
	if err != nil {
		return Counts{}, err
	}
	switch {
	case len(r.opts.IDs) > 0:
		seen := map[string]bool{}
		err = r.byIDs(ctx, seen)
		r.counts.notFound(r.opts, seen)
	case info.State.Msgs == 0:
		return r.counts, nil
	default:
		err = r.all(ctx, max(info.State.FirstSeq, 1))
	}
	return r.counts, errors.Join(err, r.watchRefused(ctx))
}

// newNATSRun finds the stream capturing cfg.DLQSubject and returns a run over the letters
// it holds now (up to its last sequence), and the stream's info.
func newNATSRun(ctx context.Context, nc *natsgo.Conn, cfg NATSConfig, opts Options) (*natsRun, *jetstream.StreamInfo, error) {
	opts = opts.prepare()
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	stream, err := dlqStream(ctx, js, cfg.DLQSubject)
	if err != nil {
		return nil, nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("dead-letter stream: %w", err)
	}
	r := &natsRun{js: js, nc: nc, stream: stream, name: info.Config.Name, cfg: cfg, opts: opts, counts: Counts{},
		last: info.State.LastSeq, sent: map[string]string{}}
	r.seen = newLetterWatch(r, info.State.LastSeq+1)
	return r, info, nil
}

// byIDs looks at the letters whose ids (stream sequences) opts.IDs names, in sequence
// order, each read by its sequence; seen gets the ids found as dead letters (a message of
// the stream on another subject is not one).
func (r *natsRun) byIDs(ctx context.Context, seen map[string]bool) error {
	var seqs []uint64
	for _, id := range r.opts.IDs {
		if seq, err := ParseNATSID(id); err == nil {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	for _, seq := range slices.Compact(seqs) {
		if r.opts.over() {
			return ErrUntil
		}
		m, err := r.at(ctx, seq)
		if err != nil || m == nil {
			if err != nil {
				return err
			}
			continue
		}
		seen[strconv.FormatUint(seq, 10)] = true
		if err := r.one(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// at is the letter at seq exactly: nil when there is none, or when the message there is
// not on the dead-letter subject.
func (r *natsRun) at(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	gctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	m, err := r.stream.GetMsg(gctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the dead letter %d: %w", seq, err)
	}
	if m.Subject != r.cfg.DLQSubject {
		return nil, nil
	}
	return m, nil
}

// ParseNATSID reads a NATS dead letter's id: its stream sequence, a decimal from 1.
func ParseNATSID(id string) (uint64, error) {
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil || seq == 0 || strconv.FormatUint(seq, 10) != id {
		return 0, fmt.Errorf("dead letter id %q: want a stream sequence (a decimal from 1)", id)
	}
	return seq, nil
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

// claims is the bucket in which runs claim letters (created on first use).
func claims(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: claimBucket, TTL: claimTTL,
		Description: "bridge redrive: letters being sent back (a claim expires after a minute)"})
	if err != nil {
		kv, err = js.KeyValue(ctx, claimBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("redrive claims its letters in the JetStream key-value bucket %s (so that two runs never send one letter twice); it could not be opened: %w", claimBucket, err)
	}
	return kv, nil
}

// natsRun is one NATS redrive.
type natsRun struct {
	js     jetstream.JetStream
	nc     *natsgo.Conn
	stream jetstream.Stream
	name   string // of the stream
	cfg    NATSConfig
	opts   Options
	counts Counts
	claims jetstream.KeyValue
	// last is the stream's last sequence at the start: the letters after it are new.
	last uint64
	// sent maps the place (letterRef) of each letter sent and stored by the ingress, not
	// yet known to be refused again, to its reason.
	sent map[string]string
	seen *letterWatch
	// purge: the selected letters are deleted, not sent back (PurgeNATS).
	purge bool
}

// letterRef is the place of the letter at seq: the value of contract.HeaderRedrive on
// what is sent back, and (prefixed "redrive:") its Nats-Msg-Id.
func (r *natsRun) letterRef(seq uint64) string {
	return r.name + ":" + strconv.FormatUint(seq, 10)
}

// all looks at the letters from sequence from up to r.last, one by one.
func (r *natsRun) all(ctx context.Context, from uint64) error {
	for seq, n := from, 0; seq <= r.last && (r.opts.Max == 0 || n < r.opts.Max); n++ {
		if r.opts.over() {
			return ErrUntil
		}
		m, err := r.next(ctx, seq)
		if err != nil || m == nil || m.Sequence > r.last {
			return err
		}
		if err := r.one(ctx, m); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

// next is the first letter at or after seq, nil when there is none.
func (r *natsRun) next(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	gctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	m, err := r.stream.GetMsg(gctx, seq, jetstream.WithGetMsgSubject(r.cfg.DLQSubject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the dead letter at or after %d: %w", seq, err)
	}
	return m, nil
}

// sendResult is what the ingress made of a letter sent back.
type sendResult int

const (
	stored    sendResult = iota // parked, or stored by the ingress stream
	refused                     // the bridge dead-lettered it anew and said so
	duplicate                   // the ingress stream already had it: not stored by this run
)

// take counts letter seq of reason in its tally: left when the run did not select it,
// selected in a dry run; otherwise it claims the letter for this run (claim), counting it
// other when another run has it. mine reports whether this run acts on it now (t then
// counts what it does); an error is the claim's.
func (r *natsRun) take(ctx context.Context, seq uint64, reason string, selected bool) (t *Tally, mine bool, err error) {
	t = r.counts.of(reason)
	switch {
	case !selected:
		t.Left++
		return t, false, nil
	case r.opts.DryRun:
		t.Selected++
		return t, false, nil
	}
	mine, err = r.claim(ctx, seq)
	if err == nil && !mine {
		t.Other++
	}
	return t, mine, err
}

// one redrives or leaves one letter.
func (r *natsRun) one(ctx context.Context, m *jetstream.RawStreamMsg) error {
	if r.purge {
		return r.purgeOne(ctx, m)
	}
	h := fromNATS(m.Header)
	reason, redrive := judge(h, strconv.FormatUint(m.Sequence, 10), r.opts, r.cfg.IngressStream == "")
	t, mine, err := r.take(ctx, m.Sequence, reason, redrive)
	if err != nil || !mine {
		return err
	}
	ref := r.letterRef(m.Sequence)
	out := &natsgo.Msg{Subject: r.cfg.Ingress, Header: toNATS(republished(h, ref)), Data: m.Data}
	out.Header.Del(jetstream.MsgIDHeader) // the dead-letter publish's id, not the message's
	res, err := r.publish(ctx, out, "redrive:"+ref)
	if err != nil {
		return fmt.Errorf("dead letter %d (%s) not redriven, it stays: %w", m.Sequence, reason, err)
	}
	if res == duplicate {
		t.Other++
		return nil
	}
	t.Selected++
	switch res {
	case refused:
		again, err := r.seen.find(ctx, ref, r.cfg.Timeout)
		if err != nil || !again {
			t.Left++ // refused, but its new letter was not seen: the old one stays
			return err
		}
		t.Refused++
	default:
		t.Redriven++
		r.sent[ref] = reason
	}
	return r.letGo(ctx, m.Sequence)
}

// claim reports whether this run may send the letter at seq: it created the letter's
// claim, and the letter is still there (another run may have sent and deleted it after
// this one read it, its claim expired since).
func (r *natsRun) claim(ctx context.Context, seq uint64) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if r.claims == nil { // opened at the first selected letter
		kv, err := claims(cctx, r.js)
		if err != nil {
			return false, err
		}
		r.claims = kv
	}
	_, err := r.claims.Create(cctx, fmt.Sprintf("%x.%d", r.name, seq), nil)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim dead letter %d: %w", seq, err)
	}
	_, err = r.stream.GetMsg(cctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dead letter %d: %w", seq, err)
	}
	return true, nil
}

// publish sends out to the ingress with Nats-Msg-Id id and waits for its confirmation.
// Through JetStream the PubAck decides: stored, or a duplicate within the stream's window
// (another run stored it: not this one). Through core NATS the bridge's reply decides:
// {"id","due"} is parked; an error reply was sent only after the bridge had dead-lettered
// the message anew (refused), except a not_replicated one, which kept nothing (an error:
// the letter stays). The bridge takes id as the message's, so its new dead letter carries
// it too: never the old letter's id, which the dead-letter stream would drop as a
// duplicate.
func (r *natsRun) publish(ctx context.Context, out *natsgo.Msg, id string) (sendResult, error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if r.cfg.IngressStream != "" {
		ack, err := r.js.PublishMsg(pctx, out, jetstream.WithMsgID(id), jetstream.WithExpectStream(r.cfg.IngressStream))
		switch {
		case err != nil:
			return 0, err
		case ack.Duplicate:
			return duplicate, nil
		}
		return stored, nil
	}
	out.Header.Set(jetstream.MsgIDHeader, id)
	reply, err := r.nc.RequestMsgWithContext(pctx, out)
	if err != nil {
		return 0, err
	}
	var answer struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &answer); err != nil {
		return 0, fmt.Errorf("unexpected reply %q: %w", reply.Data, err)
	}
	switch {
	case answer.Error == "":
		return stored, nil
	case strings.HasPrefix(answer.Error, contract.ReasonNotReplicated):
		return 0, fmt.Errorf("the bridge could not store it durably: %s", answer.Error)
	}
	return refused, nil
}

// letGo deletes a redriven letter from its stream (already gone: another run did).
func (r *natsRun) letGo(ctx context.Context, seq uint64) error {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	err := r.stream.DeleteMsg(dctx, seq)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("dead letter %d was redriven, but could not be deleted from its stream (it stays: a next run sends it again; the stream must allow deletes): %w", seq, err)
	}
	return nil
}

// watchRefused moves to Refused the letters sent through a JetStream ingress that the
// bridge dead-lettered anew, watching the stream until each was seen or none came for
// opts.Wait.
func (r *natsRun) watchRefused(ctx context.Context) error {
	if len(r.sent) == 0 || r.opts.Wait <= 0 {
		return nil
	}
	return r.seen.until(ctx, r.opts.Wait, func(ref string) bool {
		reason, ok := r.sent[ref]
		if ok {
			delete(r.sent, ref)
			t := r.counts.of(reason)
			t.Redriven--
			t.Refused++
		}
		return len(r.sent) == 0
	})
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
