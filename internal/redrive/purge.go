package redrive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Opening and purging dead letters (docs/design.md "Dead letters in the API").

// Detail is one dead letter opened: what the listing shows, its headers as stored (in
// order; a NATS letter's sorted by name) and its payload.
type Detail struct {
	Letter
	Headers headers.List
	Payload []byte
}

var (
	// ErrNotFound: no dead letter has that id (gone, never one, or not on the
	// dead-letter subject).
	ErrNotFound = errors.New("no such dead letter")
	// ErrPurgeKafka: Kafka records cannot be deleted one by one; the topic's retention
	// removes them.
	ErrPurgeKafka = errors.New("a Kafka dead letter cannot be deleted (Kafka deletes records only by the topic's retention, retention.ms, or a whole prefix of a partition); redrive moves a letter past the redrive group's committed offset")
)

// GetNATS opens the NATS dead letter id (a stream sequence): one direct read, nothing
// changes. ErrNotFound when there is none at that sequence on the dead-letter subject.
// It blocks for one round trip; ctx cancels it.
func GetNATS(ctx context.Context, nc *natsgo.Conn, cfg NATSConfig, id string) (Detail, error) {
	seq, err := ParseNATSID(id)
	if err != nil {
		return Detail{}, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return Detail{}, fmt.Errorf("jetstream: %w", err)
	}
	stream, err := dlqStream(ctx, js, cfg.DLQSubject)
	if err != nil {
		return Detail{}, err
	}
	m, err := (&natsRun{stream: stream, cfg: cfg}).at(ctx, seq)
	switch {
	case err != nil:
		return Detail{}, err
	case m == nil:
		return Detail{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	h := fromNATS(m.Header)
	return Detail{Letter: letterOf(id, h, m.Time, len(m.Data)), Headers: h, Payload: m.Data}, nil
}

// GetKafka opens the Kafka dead letter id ("<partition>:<offset>"): one read of that
// record outside any group, committing nothing. A record that is not there (before the
// partition's first offset, at or past its end, a transaction marker) is ErrNotFound;
// so is one before the redrive group's committed offset (redriven, or passed by a run).
// It blocks until the record was read or cfg.Timeout; ctx cancels it.
func GetKafka(ctx context.Context, cfg KafkaConfig, id string) (Detail, error) {
	p, o, err := ParseKafkaID(id)
	if err != nil {
		return Detail{}, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	cl, err := kgo.NewClient(append(kafkabroker.ClientOpts(cfg.Brokers, kafkabroker.DefaultClientID+"-deadletters", cfg.Security),
		kgo.MaxVersions(kafkabroker.AdminVersions()))...)
	if err != nil {
		return Detail{}, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	r := &kafkaRun{cfg: cfg, opts: Options{DryRun: true}, cl: cl}
	ranges, err := r.ranges(ctx)
	if err != nil {
		return Detail{}, err
	}
	sp, ok := ranges[p]
	if !ok || o < sp.from || o >= sp.to {
		return Detail{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	var d *Detail
	err = readSpan(ctx, cfg, "-deadletters", p, span{from: o, to: o + 1}, func(m *kgo.Record) (bool, error) {
		if m.Offset == o {
			var h headers.List
			for _, kh := range m.Headers {
				h.Add(kh.Key, string(kh.Value))
			}
			d = &Detail{Letter: letterOf(id, h, m.Timestamp, len(m.Value)), Headers: h, Payload: m.Value}
		}
		return false, nil
	})
	switch {
	case err != nil:
		return Detail{}, err
	case d == nil:
		return Detail{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return *d, nil
}

// PurgeNATS deletes the selected dead letters (opts.Reasons or opts.IDs; opts.Wait and
// Max are not used) from the stream capturing cfg.DLQSubject: those up to its last
// sequence at the start, read one by one as NATS reads them. Each selected letter is
// claimed in the redrive runs' bucket first, so a purge and a redrive (or two purges) at
// once never both act on one letter: a letter claimed or deleted by another run is
// counted Other. A dry run counts Selected and changes nothing; a purge counts Selected
// and Purged. Every letter is deleted on its own: a purge stopped halfway (an error,
// opts.Until, a kill) has deleted what it counted, and its claims expire within a minute.
// It blocks until every letter was looked at, or ctx ends; the counts are valid with an
// error too.
func PurgeNATS(ctx context.Context, nc *natsgo.Conn, cfg NATSConfig, opts Options) (Counts, error) {
	opts.Wait, opts.Max = 0, 0
	r, info, err := newNATSRun(ctx, nc, cfg, opts)
	if err != nil {
		return Counts{}, err
	}
	r.purge = true
	switch {
	case len(r.opts.IDs) > 0:
		seen := map[string]bool{}
		err = r.byIDs(ctx, seen)
		r.counts.notFound(r.opts, seen)
	case info.State.Msgs > 0:
		err = r.all(ctx, max(info.State.FirstSeq, 1))
	}
	return r.counts, err
}

// purgeOne deletes or leaves one letter of a purge.
func (r *natsRun) purgeOne(ctx context.Context, m *jetstream.RawStreamMsg) error {
	reason := reasonOf(fromNATS(m.Header))
	t, mine, err := r.take(ctx, m.Sequence, reason, r.opts.selects(reason, strconv.FormatUint(m.Sequence, 10)))
	if err != nil || !mine {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	err = r.stream.DeleteMsg(dctx, m.Sequence)
	if gone(err) {
		t.Other++
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete dead letter %d (the stream must allow deletes): %w", m.Sequence, err)
	}
	t.Selected++
	t.Purged++
	return nil
}

// jsSequenceNotFound is the JetStream error code of a delete of a sequence that is not in
// the stream (deleted since it was read).
const jsSequenceNotFound = 10043

// gone reports whether err says the message is no longer in the stream.
func gone(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrMsgNotFound) || errors.As(err, &api) && api.ErrorCode == jsSequenceNotFound
}
