package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
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
	// Group is the consumer group that a run joins (`<BRIDGE_KAFKA_GROUP>-redrive`): it hands
	// each partition to one run at a time, and its committed offsets say where the last run
	// stopped.
	Group string
	// FromStart resets the group's offsets to the first ones before the run joins (refused
	// while another run is in the group): the topic is read from its start.
	FromStart bool
	// Timeout bounds each request and each wait for a record (default 10s).
	Timeout time.Duration
}

// Kafka redrives the dead letters of cfg.DLQTopic from the group's committed offsets (or
// the first ones) up to the end offsets at its start. A run is a member of the consumer
// group cfg.Group (kafka-go's ConsumerGroup): the coordinator hands each partition to one
// run at a time, and offsets are committed with the run's generation, so two runs at
// once split the partitions and never send a letter twice (a run reads only the
// partitions it holds; the other run counts the rest). On a rebalance a run finishes the
// letter in hand, commits past it and gives the partition up before it joins again. A
// selected letter is produced to cfg.Ingress (acks from all in-sync replicas); a
// partition's offset is committed past the letters that were confirmed or not selected,
// never past a failed one. A letter the bridge refuses again is appended to the topic
// anew, past the end offsets, so this run never reads it as a letter; it watches the
// topic past those offsets for them (opts.Wait). A dry run joins no group and commits
// nothing. It blocks until the partitions it held were read to the end offsets (or
// opts.Max letters), a publish or commit failed (the error says which letter), a
// partition could not be read to its end offset within cfg.Timeout (an error: the
// letters after stay), or ctx ends. The counts are valid with an error too.
func Kafka(ctx context.Context, cfg KafkaConfig, opts Options) (Counts, error) {
	opts = opts.prepare()
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
	if len(opts.IDs) > 0 {
		r.seenIDs = map[string]bool{}
		defer func() { r.counts.notFound(opts, r.seenIDs) }()
		ranges = idRanges(ranges, opts.IDs)
	}
	if opts.DryRun {
		return r.counts, r.dryRun(ctx, ranges)
	}
	if cfg.FromStart {
		if err := r.reset(ctx, ranges); err != nil {
			return r.counts, err
		}
	}
	if err := r.member(ctx, ranges); err != nil {
		return r.counts, err
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
	// seenIDs are the ids of the letters read (a run by ids only).
	seenIDs map[string]bool
}

// KafkaID is the id of the Kafka dead letter at partition p, offset o: "<p>:<o>".
func KafkaID(p int, o int64) string { return strconv.Itoa(p) + ":" + strconv.FormatInt(o, 10) }

// ParseKafkaID reads a Kafka dead letter's id, "<partition>:<offset>" (decimals, the
// partition below 2^31, the offset from 0).
func ParseKafkaID(id string) (p int, o int64, err error) {
	ps, os, ok := strings.Cut(id, ":")
	p32, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if !ok || err1 != nil || err2 != nil || p32 < 0 || o < 0 || KafkaID(int(p32), o) != id {
		return 0, 0, fmt.Errorf("dead letter id %q: want <partition>:<offset>", id)
	}
	return int(p32), o, nil
}

// idRanges narrows ranges to the partitions that ids name, each read up to its last
// named offset: the letters after it are not passed (on Kafka a run commits past every
// letter it reads, selected or not). Partitions no id names are dropped: not read, not
// committed.
func idRanges(ranges map[int]span, ids []string) map[int]span {
	out := map[int]span{}
	for _, id := range ids {
		p, o, err := ParseKafkaID(id)
		sp, ok := ranges[p]
		if err != nil || !ok || o < sp.from || o >= sp.to {
			continue
		}
		cur, had := out[p]
		if !had {
			cur = span{from: sp.from, to: o + 1}
		}
		cur.to = max(cur.to, o+1)
		out[p] = cur
	}
	return out
}

// span is the part of a partition to read: [from, to).
type span struct{ from, to int64 }

// Group timing of a run (kafka-go's defaults are for long-lived consumers): a run that
// joins makes the others give their partitions up within a heartbeat, and a run that
// died holds its partitions for a session.
const (
	groupHeartbeat = 250 * time.Millisecond
	groupSession   = 10 * time.Second
	groupBackoff   = 250 * time.Millisecond
)

// ranges is, per partition of the dead-letter topic, where to start (the first offset;
// the committed one too for a dry run, which joins no group) and the end offset now.
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
	if r.cfg.FromStart || !r.opts.DryRun {
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

// dryRun counts the letters of every partition from the committed offsets, as a member
// would read them, without joining the group.
func (r *kafkaRun) dryRun(ctx context.Context, ranges map[int]span) error {
	for _, p := range sortedKeys(ranges) {
		if err := r.partition(ctx, ctx, p, ranges[p], nil); err != nil {
			return err
		}
		if r.opts.Max > 0 && r.seen >= r.opts.Max {
			break
		}
	}
	return nil
}

// reset commits the first offsets of every partition outside any generation, as
// `kafka-consumer-groups --reset-offsets --to-earliest` does: the coordinator refuses it
// while another run is a member of the group.
func (r *kafkaRun) reset(ctx context.Context, ranges map[int]span) error {
	var offs []kafkago.OffsetCommit
	for _, p := range sortedKeys(ranges) {
		offs = append(offs, kafkago.OffsetCommit{Partition: p, Offset: ranges[p].from})
	}
	res, err := r.cl.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{GroupID: r.cfg.Group, GenerationID: -1,
		Topics: map[string][]kafkago.OffsetCommit{r.cfg.DLQTopic: offs}})
	if err == nil {
		for _, pc := range res.Topics[r.cfg.DLQTopic] {
			err = errors.Join(err, pc.Error)
		}
	}
	if err != nil {
		return fmt.Errorf("--from-start: reset the offsets of group %s (refused while another run is in the group, or one that died less than %s ago): %w",
			r.cfg.Group, groupSession, err)
	}
	return nil
}

// genResult is what a run did with one generation's partitions: done when it read them
// all to their end offsets (or opts.Max letters), or err.
type genResult struct {
	done bool
	err  error
}

// member joins the group and reads the partitions each generation hands it, until those
// of one generation were all read to their end offsets, then leaves the group.
func (r *kafkaRun) member(ctx context.Context, ranges map[int]span) error {
	bounds, err := json.Marshal(ends(ranges))
	if err != nil {
		return fmt.Errorf("end offsets: %w", err)
	}
	cg, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{ID: r.cfg.Group, Brokers: r.cfg.Brokers,
		Dialer: kafkabroker.NewDialer(kafkabroker.DefaultClientID+"-redrive", r.cfg.Security), Topics: []string{r.cfg.DLQTopic},
		GroupBalancers:    []kafkago.GroupBalancer{boundsBalancer{bounds: bounds}},
		HeartbeatInterval: groupHeartbeat, SessionTimeout: groupSession, RebalanceTimeout: 3 * r.cfg.Timeout,
		JoinGroupBackoff: groupBackoff, StartOffset: kafkago.FirstOffset, Timeout: r.cfg.Timeout})
	if err != nil {
		return fmt.Errorf("consumer group %s: %w", r.cfg.Group, err)
	}
	defer cg.Close() // leaves the group
	var joinErr error
	deadline := time.Now().Add(r.cfg.Timeout)
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || time.Now().After(deadline) {
				return fmt.Errorf("join consumer group %s: %w", r.cfg.Group, errors.Join(err, joinErr))
			}
			joinErr = err
			continue // kafka-go joins again (after groupBackoff)
		}
		if err := r.shareBounds(ctx, ranges); err != nil {
			return err
		}
		res := make(chan genResult, 1)
		// Started in the generation, so that kafka-go joins again only after the letter in
		// hand was committed; held until the group is closed once done, so that it leaves
		// without joining first.
		gen.Start(func(gctx context.Context) {
			done, err := r.generation(ctx, gctx, gen, ranges)
			res <- genResult{done: done, err: err}
			if done || err != nil {
				<-gctx.Done()
			}
		})
		if out := <-res; out.done || out.err != nil {
			return out.err
		}
		deadline = time.Now().Add(r.cfg.Timeout)
	}
}

// boundsBalancer is kafka-go's range assignment under the protocol name "delaybridge-redrive"
// (a consumer of another kind cannot join the group), with the run's end offsets at its
// start (ends) as member user data, which every member reads with DescribeGroups.
type boundsBalancer struct {
	kafkago.RangeGroupBalancer
	bounds []byte
}

// ProtocolName names the assignment protocol of redrive runs.
func (boundsBalancer) ProtocolName() string { return "delaybridge-redrive" }

// UserData is the run's end offsets at its start, JSON-encoded.
func (b boundsBalancer) UserData() ([]byte, error) { return b.bounds, nil }

// ends is the end offset of each partition of ranges.
func ends(ranges map[int]span) map[int]int64 {
	out := make(map[int]int64, len(ranges))
	for p, sp := range ranges {
		out[p] = sp.to
	}
	return out
}

// shareBounds lowers the end offsets of ranges to those of the other runs in the group now
// (their user data): runs in the group at the same time all stop at the earliest run's end
// offsets, so a letter that one of them redrove and the bridge refused again (a new record
// past them) is not redriven by another in the same go. A run that joins after the others
// left is a later run and reads up to its own end offsets.
func (r *kafkaRun) shareBounds(ctx context.Context, ranges map[int]span) error {
	res, err := r.cl.DescribeGroups(ctx, &kafkago.DescribeGroupsRequest{GroupIDs: []string{r.cfg.Group}})
	if err == nil && len(res.Groups) == 1 {
		err = res.Groups[0].Error
	}
	if err != nil {
		return fmt.Errorf("describe consumer group %s: %w", r.cfg.Group, err)
	}
	for _, g := range res.Groups {
		for _, m := range g.Members {
			var theirs map[int]int64
			if json.Unmarshal(m.MemberMetadata.UserData, &theirs) != nil {
				continue // not a redrive run: it could not have joined (another protocol)
			}
			for p, end := range theirs {
				if sp, ok := ranges[p]; ok && end < sp.to {
					ranges[p] = span{from: sp.from, to: end}
				}
			}
		}
	}
	return nil
}

// generation reads the partitions that gen assigned, from their committed offsets up to
// their end offsets, until gctx ends (the generation did: done is false).
func (r *kafkaRun) generation(ctx, gctx context.Context, gen *kafkago.Generation, ranges map[int]span) (done bool, err error) {
	assigned := gen.Assignments[r.cfg.DLQTopic]
	sort.Slice(assigned, func(i, j int) bool { return assigned[i].ID < assigned[j].ID })
	commit := func(p int, offset int64) error {
		return gen.CommitOffsets(map[string]map[int]int64{r.cfg.DLQTopic: {p: offset}})
	}
	for _, pa := range assigned {
		sp, ok := ranges[pa.ID]
		if !ok {
			continue // a partition added since the start: its letters are for a later run
		}
		if pa.Offset >= 0 { // else nothing committed (kafka-go's FirstOffset): the first one
			sp.from = min(max(pa.Offset, sp.from), sp.to)
		}
		if err := r.partition(ctx, gctx, pa.ID, sp, commit); err != nil {
			return false, err
		}
		if gctx.Err() != nil {
			return false, nil
		}
		if r.opts.Max > 0 && r.seen >= r.opts.Max {
			return true, nil
		}
	}
	return true, nil
}

// partition reads one partition's span, letter by letter, committing past each (commit
// nil: a dry run). It stops between letters when gctx ends (nil then): the letter in hand
// is finished with ctx.
func (r *kafkaRun) partition(ctx, gctx context.Context, p int, sp span, commit func(p int, offset int64) error) error {
	if sp.from >= sp.to {
		return nil
	}
	rd := kafkago.NewReader(kafkago.ReaderConfig{Brokers: r.cfg.Brokers, Topic: r.cfg.DLQTopic, Partition: p,
		Dialer: kafkabroker.NewDialer(kafkabroker.DefaultClientID+"-redrive", r.cfg.Security), MaxWait: 500 * time.Millisecond})
	defer rd.Close()
	if err := rd.SetOffset(sp.from); err != nil {
		return fmt.Errorf("dead letters, partition %d: %w", p, err)
	}
	for (r.opts.Max == 0 || r.seen < r.opts.Max) && gctx.Err() == nil {
		if r.opts.over() {
			return ErrUntil
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		stop := context.AfterFunc(gctx, cancel)
		m, err := rd.ReadMessage(rctx)
		stop()
		cancel()
		if err != nil {
			if ctx.Err() == nil && gctx.Err() != nil {
				return nil // the generation ended: the partition goes to whom it is handed
			}
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && rd.Offset() >= sp.to {
				return nil // nothing more below the end offset (control records)
			}
			return fmt.Errorf("dead letters, partition %d: read up to offset %d of %d: %w", p, rd.Offset(), sp.to, err)
		}
		r.seen++
		if err := r.one(ctx, m, commit); err != nil {
			return err
		}
		if m.Offset+1 >= sp.to {
			return nil
		}
	}
	return nil
}

// one redrives or leaves one letter, then commits past it (commit nil: a dry run).
func (r *kafkaRun) one(ctx context.Context, m kafkago.Message, commit func(p int, offset int64) error) error {
	var h headers.List
	for _, kh := range m.Headers {
		h.Add(kh.Key, string(kh.Value))
	}
	id := KafkaID(m.Partition, m.Offset)
	if r.seenIDs != nil {
		r.seenIDs[id] = true
	}
	reason, redrive := judge(h, id, r.opts, false)
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
	if commit == nil {
		return nil
	}
	if err := commit(m.Partition, m.Offset+1); err != nil {
		return fmt.Errorf("commit group %s partition %d offset %d (the letters before it were handled; a next run may send some again): %w",
			r.cfg.Group, m.Partition, m.Offset+1, err)
	}
	return nil
}

// sortedKeys is the partitions of ranges in order.
func sortedKeys(ranges map[int]span) []int {
	parts := make([]int, 0, len(ranges))
	for p := range ranges {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	return parts
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
