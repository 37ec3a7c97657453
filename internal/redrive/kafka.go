package redrive

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/contract"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// KafkaConfig says where the dead letters are and where they go.
type KafkaConfig struct {
	// Brokers and Security reach the cluster (BRIDGE_KAFKA_BROKERS, TLS, SASL).
	Brokers  []string
	Security kafkabroker.Security
	// DLQTopic is the dead-letter topic (BRIDGE_DLQ_SUBJECT); Ingress the bridge's ingress
	// topic (BRIDGE_KAFKA_TOPIC).
	DLQTopic, Ingress string
	// Group is the consumer group whose committed offsets say where the last run stopped
	// (`<BRIDGE_KAFKA_GROUP>-redrive`).
	Group string
	// FromStart reads the topic from its first offset, whatever was committed.
	FromStart bool
	// Timeout bounds each request and each wait for a record (default 10s).
	Timeout time.Duration
}

// Kafka redrives the dead letters of cfg.DLQTopic from the group's committed offsets (or
// the first ones) up to the end offsets at its start. A selected letter is produced to
// cfg.Ingress (acks from all in-sync replicas); a partition's offset is committed past the
// letters that were confirmed or not selected, never past a failed one. A letter the
// bridge refuses again is appended to the topic anew (a topic keeps every record: nothing
// is dropped as a duplicate); the run watches the topic past its end offsets for them
// (opts.Wait). It blocks until every partition was read to its end offset (or opts.Max
// letters), a publish failed (the error says which letter), a partition could not be
// read to its end offset within cfg.Timeout (an error: the letters after stay), or ctx
// ends. The counts are valid with an error too.
func Kafka(ctx context.Context, cfg KafkaConfig, opts Options) (Counts, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	tr := kafkabroker.NewTransport(kafkabroker.DefaultClientID+"-redrive", cfg.Security)
	defer tr.CloseIdleConnections()
	r := &kafkaRun{cfg: cfg, opts: opts, counts: Counts{}, sent: map[string]string{},
		cl: &kafkago.Client{Addr: kafkago.TCP(cfg.Brokers...), Transport: tr, Timeout: cfg.Timeout},
		w: &kafkago.Writer{Addr: kafkago.TCP(cfg.Brokers...), Transport: tr, Topic: cfg.Ingress,
			RequiredAcks: kafkago.RequireAll, Balancer: &kafkago.Hash{}, BatchTimeout: time.Millisecond}}
	defer r.w.Close()
	ranges, err := r.ranges(ctx)
	if err != nil {
		return r.counts, err
	}
	parts := make([]int, 0, len(ranges))
	for p := range ranges {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	for _, p := range parts {
		if err := r.partition(ctx, p, ranges[p]); err != nil {
			return r.counts, err
		}
		if r.opts.Max > 0 && r.seen >= r.opts.Max {
			break
		}
	}
	return r.counts, r.watchRefused(ctx, ranges)
}

// kafkaRun is one Kafka redrive.
type kafkaRun struct {
	cfg    KafkaConfig
	opts   Options
	counts Counts
	cl     *kafkago.Client
	w      *kafkago.Writer
	seen   int
	// sent maps the place (contract.HeaderRedrive) of each letter produced to the ingress,
	// not yet seen refused again, to its reason.
	sent map[string]string
}

// span is the part of a partition to read: [from, to).
type span struct{ from, to int64 }

// ranges is, per partition of the dead-letter topic, where to start (the committed offset,
// or the first one) and the end offset now.
func (r *kafkaRun) ranges(ctx context.Context) (map[int]span, error) {
	meta, err := r.cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{r.cfg.DLQTopic}})
	if err != nil {
		return nil, fmt.Errorf("kafka metadata: %w", err)
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		var terr error
		if len(meta.Topics) == 1 {
			terr = meta.Topics[0].Error
		}
		return nil, fmt.Errorf("dead-letter topic %q: %w", r.cfg.DLQTopic, errors.Join(terr, errors.New("not found")))
	}
	var reqs []kafkago.OffsetRequest
	var ids []int
	for _, p := range meta.Topics[0].Partitions {
		ids = append(ids, p.ID)
		reqs = append(reqs, kafkago.FirstOffsetOf(p.ID), kafkago.LastOffsetOf(p.ID))
	}
	lo, err := r.cl.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{r.cfg.DLQTopic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("dead-letter topic offsets: %w", err)
	}
	out := map[int]span{}
	for _, po := range lo.Topics[r.cfg.DLQTopic] {
		if po.Error != nil {
			return nil, fmt.Errorf("dead-letter topic offsets, partition %d: %w", po.Partition, po.Error)
		}
		out[po.Partition] = span{from: po.FirstOffset, to: po.LastOffset}
	}
	if r.cfg.FromStart {
		return out, nil
	}
	of, err := r.cl.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: r.cfg.Group, Topics: map[string][]int{r.cfg.DLQTopic: ids}})
	if err == nil {
		err = of.Error
	}
	if errors.Is(err, kafkago.GroupIdNotFound) {
		return out, nil // no run committed yet
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets of group %s: %w", r.cfg.Group, err)
	}
	for _, c := range of.Topics[r.cfg.DLQTopic] {
		if sp, ok := out[c.Partition]; ok && c.Error == nil && c.CommittedOffset > sp.from {
			out[c.Partition] = span{from: min(c.CommittedOffset, sp.to), to: sp.to}
		}
	}
	return out, nil
}

// partition reads one partition's span, letter by letter.
func (r *kafkaRun) partition(ctx context.Context, p int, sp span) error {
	if sp.from >= sp.to {
		return nil
	}
	rd := kafkago.NewReader(kafkago.ReaderConfig{Brokers: r.cfg.Brokers, Topic: r.cfg.DLQTopic, Partition: p,
		Dialer: kafkabroker.NewDialer(kafkabroker.DefaultClientID+"-redrive", r.cfg.Security), MaxWait: 500 * time.Millisecond})
	defer rd.Close()
	if err := rd.SetOffset(sp.from); err != nil {
		return fmt.Errorf("dead letters, partition %d: %w", p, err)
	}
	for r.opts.Max == 0 || r.seen < r.opts.Max {
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		m, err := rd.ReadMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && rd.Offset() >= sp.to {
				return nil // nothing more below the end offset (control records)
			}
			return fmt.Errorf("dead letters, partition %d: read up to offset %d of %d: %w", p, rd.Offset(), sp.to, err)
		}
		r.seen++
		if err := r.one(ctx, m); err != nil {
			return err
		}
		if m.Offset+1 >= sp.to {
			return nil
		}
	}
	return nil
}

// one redrives or leaves one letter, then commits past it (not in a dry run).
func (r *kafkaRun) one(ctx context.Context, m kafkago.Message) error {
	var h headers.List
	for _, kh := range m.Headers {
		h.Add(kh.Key, string(kh.Value))
	}
	reason, redrive := judge(h, r.opts, false)
	t := r.counts.of(reason)
	switch {
	case !redrive:
		t.Left++
	case r.opts.DryRun:
		t.Selected++
		return nil
	default:
		ref := fmt.Sprintf("%s:%d:%d", m.Topic, m.Partition, m.Offset)
		out := kafkago.Message{Key: m.Key, Value: m.Value}
		for _, f := range republished(h, ref) {
			out.Headers = append(out.Headers, kafkago.Header{Key: f.Key, Value: []byte(f.Value)})
		}
		wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		err := r.w.WriteMessages(wctx, out)
		cancel()
		if err != nil {
			return fmt.Errorf("dead letter %d/%d (%s) not redriven, it stays: %w", m.Partition, m.Offset, reason, err)
		}
		t.Selected++
		t.Redriven++
		r.sent[ref] = reason
	}
	if r.opts.DryRun {
		return nil
	}
	return r.commit(ctx, m.Partition, m.Offset+1)
}

// commit records that the group is done with a partition below offset.
func (r *kafkaRun) commit(ctx context.Context, p int, offset int64) error {
	res, err := r.cl.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{GroupID: r.cfg.Group, GenerationID: -1,
		Topics: map[string][]kafkago.OffsetCommit{r.cfg.DLQTopic: {{Partition: p, Offset: offset}}}})
	if err == nil {
		for _, pc := range res.Topics[r.cfg.DLQTopic] {
			if pc.Error != nil {
				err = pc.Error
			}
		}
	}
	if err != nil {
		return fmt.Errorf("commit group %s partition %d offset %d (the letters before it were handled; a next run may send some again): %w",
			r.cfg.Group, p, offset, err)
	}
	return nil
}

// watchRefused moves to Refused the letters produced to the ingress that the bridge
// dead-lettered anew: it reads every partition past its end offset at the start until
// each was seen or no such letter came for opts.Wait.
func (r *kafkaRun) watchRefused(ctx context.Context, ranges map[int]span) error {
	if len(r.sent) == 0 || r.opts.Wait <= 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	refs := make(chan string)
	errs := make(chan error, len(ranges))
	for p, sp := range ranges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.follow(wctx, p, sp.to, refs)
		}()
	}
	quiet := time.NewTimer(r.opts.Wait)
	defer quiet.Stop()
	for len(r.sent) > 0 {
		select {
		case ref := <-refs:
			if reason, ok := r.sent[ref]; ok {
				delete(r.sent, ref)
				t := r.counts.of(reason)
				t.Redriven--
				t.Refused++
				quiet.Reset(r.opts.Wait)
			}
		case err := <-errs:
			return err
		case <-quiet.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// follow sends the contract.HeaderRedrive value of each record of partition p from
// offset on to refs, until ctx ends (nil then).
func (r *kafkaRun) follow(ctx context.Context, p int, offset int64, refs chan<- string) error {
	rd := kafkago.NewReader(kafkago.ReaderConfig{Brokers: r.cfg.Brokers, Topic: r.cfg.DLQTopic, Partition: p,
		Dialer: kafkabroker.NewDialer(kafkabroker.DefaultClientID+"-redrive", r.cfg.Security), MaxWait: 200 * time.Millisecond})
	defer rd.Close()
	if err := rd.SetOffset(offset); err != nil {
		return fmt.Errorf("watch dead letters, partition %d: %w", p, err)
	}
	for {
		m, err := rd.ReadMessage(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch dead letters, partition %d: %w", p, err)
		}
		for _, h := range m.Headers {
			if strings.EqualFold(h.Key, contract.HeaderRedrive) {
				select {
				case refs <- string(h.Value):
				case <-ctx.Done():
					return nil
				}
			}
		}
	}
}
