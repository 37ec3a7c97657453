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

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delaybridge/delaybridge/contract"
	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
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
// group cfg.Group (a franz-go group client): the coordinator hands each partition to one
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
	// One client: admin requests, and the producer of the letters (idempotent, acks from
	// all in-sync replicas, keyed records partitioned with murmur2).
	cl, err := kgo.NewClient(append(kafkabroker.ClientOpts(cfg.Brokers, kafkabroker.DefaultClientID+"-redrive", cfg.Security),
		kgo.DefaultProduceTopic(cfg.Ingress), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.RequestTimeoutOverhead(cfg.Timeout), kgo.MaxVersions(kafkabroker.AdminVersions()))...)
	if err != nil {
		return Counts{}, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	r := &kafkaRun{cfg: cfg, opts: opts, counts: Counts{}, sent: map[string]string{}, cl: cl}
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
	cl     *kgo.Client // admin requests and the producer
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

// Group timing of a run (Kafka's defaults are for long-lived consumers): a run that
// joins makes the others give their partitions up within a heartbeat, and a run that
// died holds its partitions for a session.
const (
	groupHeartbeat = 250 * time.Millisecond
	groupSession   = 10 * time.Second
)

// ranges is, per partition of the dead-letter topic, where to start (the first offset;
// the committed one too for a dry run, which joins no group) and the end offset now.
func (r *kafkaRun) ranges(ctx context.Context) (map[int]span, error) {
	tctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	ids, err := r.partitions(tctx)
	if err != nil {
		return nil, err
	}
	first, err := r.listOffsets(tctx, ids, -2)
	if err != nil {
		return nil, err
	}
	last, err := r.listOffsets(tctx, ids, -1)
	if err != nil {
		return nil, err
	}
	out := map[int]span{}
	for _, p := range ids {
		out[int(p)] = span{from: first[p], to: last[p]}
	}
	if r.cfg.FromStart || !r.opts.DryRun {
		return out, nil
	}
	if err := r.fromCommitted(tctx, ids, out); err != nil {
		return nil, err
	}
	return out, nil
}

// partitions are the partitions of the dead-letter topic; an error when it has none.
func (r *kafkaRun) partitions(ctx context.Context) ([]int32, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(r.cfg.DLQTopic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, r.cl)
	if err != nil {
		return nil, fmt.Errorf("kafka metadata: %w", err)
	}
	if len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != 0 || len(mresp.Topics[0].Partitions) == 0 {
		var terr error
		if len(mresp.Topics) == 1 {
			terr = kerr.ErrorForCode(mresp.Topics[0].ErrorCode)
		}
		return nil, fmt.Errorf("dead-letter topic %q: %w", r.cfg.DLQTopic, errors.Join(terr, errors.New("not found")))
	}
	var ids []int32
	for _, p := range mresp.Topics[0].Partitions {
		ids = append(ids, p.Partition)
	}
	return ids, nil
}

// fromCommitted starts each span of out (partitions ids) at the group's committed offset
// where the group committed one past its start (a group that never committed: unchanged).
func (r *kafkaRun) fromCommitted(ctx context.Context, ids []int32, out map[int]span) error {
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = r.cfg.Group
	ot := kmsg.NewOffsetFetchRequestTopic()
	ot.Topic, ot.Partitions = r.cfg.DLQTopic, ids
	of.Topics = append(of.Topics, ot)
	oresp, err := of.RequestWith(ctx, r.cl)
	if err == nil {
		err = kerr.ErrorForCode(oresp.ErrorCode)
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // no run committed yet
	}
	if err != nil {
		return fmt.Errorf("committed offsets of group %s: %w", r.cfg.Group, err)
	}
	for _, t := range oresp.Topics {
		for _, c := range t.Partitions {
			if sp, ok := out[int(c.Partition)]; ok && c.ErrorCode == 0 && c.Offset > sp.from {
				out[int(c.Partition)] = span{from: min(c.Offset, sp.to), to: sp.to}
			}
		}
	}
	return nil
}

// listOffsets is the offset at ts (-2: the first, -1: the end, the high watermark) of
// each of partitions of the dead-letter topic.
func (r *kafkaRun) listOffsets(ctx context.Context, partitions []int32, ts int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 0 // the high watermark: a letter of an open transaction is waited for
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = r.cfg.DLQTopic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, ts
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	shards := r.cl.RequestSharded(ctx, req) // partitions may have different leaders
	out := map[int32]int64{}
	for _, sh := range shards {
		if sh.Err != nil {
			return nil, fmt.Errorf("dead-letter topic offsets: %w", sh.Err)
		}
		for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("dead-letter topic offsets, partition %d: %w", p.Partition, err)
				}
				out[p.Partition] = p.Offset
			}
		}
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("dead-letter topic offsets, partition %d: no answer", p)
		}
	}
	return out, nil
}

// dryRun counts the letters of every partition from the committed offsets, as a member
// would read them, without joining the group.
func (r *kafkaRun) dryRun(ctx context.Context, ranges map[int]span) error {
	for _, p := range sortedKeys(ranges) {
		if err := r.partition(ctx, p, ranges[p]); err != nil {
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
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = r.cfg.Group, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = r.cfg.DLQTopic
	for _, p := range sortedKeys(ranges) {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = int32(p), ranges[p].from
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	tctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	resp, err := req.RequestWith(tctx, r.cl)
	if err == nil {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				err = errors.Join(err, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	}
	if err != nil {
		return fmt.Errorf("--from-start: reset the offsets of group %s (refused while another run is in the group, or one that died less than %s ago): %w",
			r.cfg.Group, groupSession, err)
	}
	return nil
}

// member joins the group and reads the partitions each assignment hands it, until those
// of one assignment were all read to their end offsets (or opts.Max letters), then
// leaves the group. Rebalances wait between polls (BlockRebalanceOnPoll) and a poll takes
// one letter: a revoked partition is given up once the letter in hand was handled and
// committed past.
func (r *kafkaRun) member(ctx context.Context, ranges map[int]span) error {
	m := &groupMember{r: r, ranges: ranges, idleSince: time.Now()}
	if err := m.join(); err != nil {
		return err
	}
	defer m.cl.Close() // leaves the group
	for {
		if done, err := m.step(ctx); done || err != nil {
			return err
		}
	}
}

// groupMember is one run's membership of the dead letters' consumer group (see member).
type groupMember struct {
	r      *kafkaRun
	ranges map[int]span
	cl     *kgo.Client

	mu          sync.Mutex
	assigned    []int32 // the current assignment; nil before the first and once revoked or lost
	assignments int     // assignments handed out so far

	seen      int            // the assignment left is of (0: none yet)
	left      map[int32]span // per assigned partition not yet read to its end: what is left
	idleSince time.Time      // the last record handled, or assignment taken
}

// join creates the group client; it takes the assignments the group hands out.
func (m *groupMember) join() error {
	r := m.r
	bounds, err := json.Marshal(ends(m.ranges))
	if err != nil {
		return fmt.Errorf("end offsets: %w", err)
	}
	m.cl, err = kgo.NewClient(append(kafkabroker.ClientOpts(r.cfg.Brokers, kafkabroker.DefaultClientID+"-redrive", r.cfg.Security),
		kgo.ConsumerGroup(r.cfg.Group), kgo.ConsumeTopics(r.cfg.DLQTopic),
		kgo.Balancers(boundsBalancer{GroupBalancer: kgo.RangeBalancer(), bounds: bounds}),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.KeepControlRecords(),
		kgo.HeartbeatInterval(groupHeartbeat), kgo.SessionTimeout(groupSession), kgo.RebalanceTimeout(3*r.cfg.Timeout),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.setAssigned(append([]int32{}, a[r.cfg.DLQTopic]...), 1)
		}),
		kgo.OnPartitionsRevoked(func(context.Context, *kgo.Client, map[string][]int32) { m.setAssigned(nil, 0) }),
		kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) { m.setAssigned(nil, 0) }),
	)...)
	if err != nil {
		return fmt.Errorf("consumer group %s: %w", r.cfg.Group, err)
	}
	return nil
}

// setAssigned records the group's current assignment (nil: none), counting it as a new
// one when added is 1. Called from the client's group callbacks.
func (m *groupMember) setAssigned(a []int32, added int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.assigned = a
	m.assignments += added
}

// step polls one letter and handles it; done when the run's reading ends (err nil: all
// read, or opts.Max letters). ctx cancels the poll and the handling.
func (m *groupMember) step(ctx context.Context) (done bool, err error) {
	// The assignment of the records about to be polled is set before they are (and
	// cannot change until AllowRebalance).
	if current, err := m.refresh(ctx); err != nil {
		return true, err
	} else if current && len(m.left) == 0 {
		return true, nil
	}
	if m.r.opts.Max > 0 && m.r.seen >= m.r.opts.Max {
		return true, nil
	}
	if m.r.opts.over() {
		return true, ErrUntil
	}
	rec, ferr := m.poll(ctx)
	if ctx.Err() != nil {
		m.cl.AllowRebalance()
		return true, ctx.Err()
	}
	if rec == nil {
		m.cl.AllowRebalance()
		return m.idle(ctx, ferr)
	}
	if _, err := m.refresh(ctx); err != nil {
		m.cl.AllowRebalance()
		return true, err
	}
	m.idleSince = time.Now()
	err = m.r.memberRecord(ctx, rec, m.left, func(p int, offset int64) error { return m.commit(ctx, p, offset) })
	m.cl.AllowRebalance()
	return err != nil, err
}

// refresh takes a new assignment when the group handed one out since the last call; it
// reports whether the assignment in hand is the group's current one.
func (m *groupMember) refresh(ctx context.Context) (current bool, err error) {
	m.mu.Lock()
	cur, n := m.assigned, m.assignments
	m.mu.Unlock()
	if cur != nil && n != m.seen {
		m.seen = n
		if m.left, err = m.r.assignment(ctx, cur, m.ranges); err != nil {
			return false, err
		}
	}
	return cur != nil && n == m.seen, nil
}

// poll waits a short while (an assignment with nothing left to read ends the run at
// once) for one letter: nil when none came; the fetch errors other than the wait's end.
func (m *groupMember) poll(ctx context.Context) (*kgo.Record, error) {
	pctx, cancel := context.WithTimeout(ctx, min(m.r.cfg.Timeout, 250*time.Millisecond))
	fs := m.cl.PollRecords(pctx, 1)
	cancel()
	var rec *kgo.Record
	var ferr error
	fs.EachError(func(_ string, _ int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) {
			ferr = errors.Join(ferr, err)
		}
	})
	fs.EachRecord(func(x *kgo.Record) { rec = x })
	return rec, ferr
}

// idle handles a poll that brought no letter (ferr: its fetch errors): done when the
// assignment was read to its end; an error when the fetch failed, or nothing was
// assigned or read within cfg.Timeout.
func (m *groupMember) idle(ctx context.Context, ferr error) (done bool, err error) {
	before := m.seen
	current, err := m.refresh(ctx)
	switch {
	case err != nil:
		return true, err
	case current && len(m.left) == 0:
		return true, nil
	case m.seen != before:
		m.idleSince = time.Now()
	}
	if time.Since(m.idleSince) < m.r.cfg.Timeout && ferr == nil {
		return false, nil
	}
	switch {
	case ferr != nil:
		return true, fmt.Errorf("dead letters: %w", ferr)
	case m.seen == 0:
		return true, fmt.Errorf("join consumer group %s: no assignment within %s", m.r.cfg.Group, m.r.cfg.Timeout)
	case current && len(m.left) > 0:
		for p, sp := range m.left {
			return true, fmt.Errorf("dead letters, partition %d: read up to offset %d of %d: no record within %s", p, sp.from, sp.to, m.r.cfg.Timeout)
		}
	}
	return false, nil
}

// commit commits offset for partition p of the dead-letter topic and waits for the
// answer (at most cfg.Timeout; ctx cancels it).
func (m *groupMember) commit(ctx context.Context, p int, offset int64) error {
	var cerr error
	cctx, cancel := context.WithTimeout(ctx, m.r.cfg.Timeout)
	defer cancel()
	m.cl.CommitOffsetsSync(cctx, map[string]map[int32]kgo.EpochOffset{m.r.cfg.DLQTopic: {int32(p): {Epoch: -1, Offset: offset}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			cerr = err
			if resp != nil {
				for _, t := range resp.Topics {
					for _, p := range t.Partitions {
						cerr = errors.Join(cerr, kerr.ErrorForCode(p.ErrorCode))
					}
				}
			}
		})
	return cerr
}

// assignment is, for the partitions of a new assignment that ranges knows (a partition
// added since the start holds letters for a later run), what is left to read: from the
// group's committed offset (the first one without) to the end offset, lowered to the
// other runs' end offsets (shareBounds). A partition with nothing left is not in it.
func (r *kafkaRun) assignment(ctx context.Context, assigned []int32, ranges map[int]span) (map[int32]span, error) {
	if err := r.shareBounds(ctx, ranges); err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = r.cfg.Group
	ot := kmsg.NewOffsetFetchRequestTopic()
	ot.Topic, ot.Partitions = r.cfg.DLQTopic, assigned
	of.Topics = append(of.Topics, ot)
	resp, err := of.RequestWith(tctx, r.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("committed offsets of group %s: %w", r.cfg.Group, err)
	}
	committed := map[int32]int64{}
	if err == nil {
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == 0 {
					committed[p.Partition] = p.Offset
				}
			}
		}
	}
	left := map[int32]span{}
	for _, p := range assigned {
		sp, ok := ranges[int(p)]
		if !ok {
			continue
		}
		if c, ok := committed[p]; ok && c >= 0 {
			sp.from = min(max(c, sp.from), sp.to)
		}
		if sp.from < sp.to {
			left[p] = sp
		}
	}
	return left, nil
}

// memberRecord handles one record polled by a member: a letter below its partition's end
// offset is redriven or left and committed past; a record at or past it (a letter
// refused again) or a transaction marker is not a letter. A partition read to its end
// leaves left.
func (r *kafkaRun) memberRecord(ctx context.Context, rec *kgo.Record, left map[int32]span, commit func(p int, offset int64) error) error {
	sp, ok := left[rec.Partition]
	if !ok {
		return nil // read already (or not this run's)
	}
	if rec.Offset >= sp.to {
		delete(left, rec.Partition)
		return nil
	}
	if !rec.Attrs.IsControl() {
		r.seen++
		if err := r.one(ctx, rec, commit); err != nil {
			return err
		}
	}
	if rec.Offset+1 >= sp.to {
		delete(left, rec.Partition)
	} else {
		left[rec.Partition] = span{from: rec.Offset + 1, to: sp.to}
	}
	return nil
}

// boundsBalancer is franz-go's range assignment under the protocol name
// "delaybridge-redrive" (a consumer of another kind cannot join the group), with the
// run's end offsets at its start (ends) as member user data, which every member reads
// with DescribeGroups.
type boundsBalancer struct {
	kgo.GroupBalancer
	bounds []byte
}

// ProtocolName names the assignment protocol of redrive runs.
func (boundsBalancer) ProtocolName() string { return "delaybridge-redrive" }

// JoinGroupMetadata is the consumer protocol's member metadata with the run's end
// offsets, JSON-encoded, as user data.
func (b boundsBalancer) JoinGroupMetadata(interests []string, _ map[string][]int32, _ int32) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics = interests
	m.UserData = b.bounds
	return m.AppendTo(nil)
}

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
	tctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{r.cfg.Group}
	resp, err := req.RequestWith(tctx, r.cl)
	if err == nil && len(resp.Groups) == 1 {
		err = kerr.ErrorForCode(resp.Groups[0].ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("describe consumer group %s: %w", r.cfg.Group, err)
	}
	for _, g := range resp.Groups {
		for _, m := range g.Members {
			var meta kmsg.ConsumerMemberMetadata
			if meta.ReadFrom(m.ProtocolMetadata) != nil {
				continue
			}
			var theirs map[int]int64
			if json.Unmarshal(meta.UserData, &theirs) != nil {
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

// partition reads one partition's span outside any group, letter by letter (a dry run:
// nothing is committed).
func (r *kafkaRun) partition(ctx context.Context, p int, sp span) error {
	return readSpan(ctx, r.cfg, "-redrive", p, sp, func(rec *kgo.Record) (bool, error) {
		if r.opts.over() {
			return false, ErrUntil
		}
		r.seen++
		if err := r.one(ctx, rec, nil); err != nil {
			return false, err
		}
		return r.opts.Max == 0 || r.seen < r.opts.Max, nil
	})
}

// readSpan reads partition p of cfg.DLQTopic from sp.from up to sp.to outside any group
// (read_committed, committing nothing) and hands each letter to fn until fn returns false
// or an error; transaction markers are passed over. Each wait for a record is bounded by
// cfg.Timeout: the partition not read to sp.to by then is an error.
func readSpan(ctx context.Context, cfg KafkaConfig, role string, p int, sp span, fn func(*kgo.Record) (bool, error)) error {
	if sp.from >= sp.to {
		return nil
	}
	cl, err := kgo.NewClient(append(kafkabroker.ClientOpts(cfg.Brokers, kafkabroker.DefaultClientID+role, cfg.Security),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.DLQTopic: {int32(p): kgo.NewOffset().At(sp.from)}}),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("dead letters, partition %d: %w", p, err)
	}
	defer cl.Close()
	next := sp.from
	for next < sp.to {
		pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		fs := cl.PollRecords(pctx, 0)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = errors.Join(ferr, err)
			}
		})
		if ferr != nil {
			return fmt.Errorf("dead letters, partition %d: read up to offset %d of %d: %w", p, next, sp.to, ferr)
		}
		if fs.NumRecords() == 0 {
			return fmt.Errorf("dead letters, partition %d: read up to offset %d of %d: no record within %s", p, next, sp.to, cfg.Timeout)
		}
		for _, rec := range fs.Records() {
			if rec.Offset >= sp.to {
				return nil
			}
			next = rec.Offset + 1
			if rec.Attrs.IsControl() {
				continue
			}
			more, err := fn(rec)
			if err != nil || !more {
				return err
			}
		}
	}
	return nil
}

// one redrives or leaves one letter, then commits past it (commit nil: a dry run).
func (r *kafkaRun) one(ctx context.Context, m *kgo.Record, commit func(p int, offset int64) error) error {
	var h headers.List
	for _, kh := range m.Headers {
		h.Add(kh.Key, string(kh.Value))
	}
	p := int(m.Partition)
	id := KafkaID(p, m.Offset)
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
		ref := fmt.Sprintf("%s:%d:%d", m.Topic, p, m.Offset)
		out := &kgo.Record{Key: m.Key, Value: m.Value}
		for _, f := range republished(h, ref) {
			out.Headers = append(out.Headers, kgo.RecordHeader{Key: f.Key, Value: []byte(f.Value)})
		}
		wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		err := r.cl.ProduceSync(wctx, out).FirstErr()
		cancel()
		if err != nil {
			return fmt.Errorf("dead letter %d/%d (%s) not redriven, it stays: %w", p, m.Offset, reason, err)
		}
		t.Selected++
		t.Redriven++
		r.sent[ref] = reason
	}
	if commit == nil {
		return nil
	}
	if err := commit(p, m.Offset+1); err != nil {
		return fmt.Errorf("commit group %s partition %d offset %d (the letters before it were handled; a next run may send some again): %w",
			r.cfg.Group, p, m.Offset+1, err)
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
	cl, err := kgo.NewClient(append(kafkabroker.ClientOpts(r.cfg.Brokers, kafkabroker.DefaultClientID+"-redrive", r.cfg.Security),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.DLQTopic: {int32(p): kgo.NewOffset().At(offset)}}),
		kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("watch dead letters, partition %d: %w", p, err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return fmt.Errorf("watch dead letters, partition %d: %w", p, ferr)
		}
		for _, m := range fs.Records() {
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
}
