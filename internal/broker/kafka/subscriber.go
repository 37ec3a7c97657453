package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/internal/backoff"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Subscriber defaults.
const (
	DefaultMaxInFlight       = 1000
	DefaultSessionTimeout    = 10 * time.Second
	DefaultHeartbeatInterval = 500 * time.Millisecond
	DefaultRebalanceTimeout  = 30 * time.Second
	DefaultDrainTimeout      = 5 * time.Second
	DefaultNackResendDelay   = 100 * time.Millisecond
	DefaultCommitInterval    = 100 * time.Millisecond
	// DefaultMissingTopicInterval is how often a missing topic is looked for again.
	DefaultMissingTopicInterval = time.Minute
)

const (
	// partitionWatchInterval is how often a member refreshes its topic's metadata; a
	// change of the partition count (partitions added, the topic deleted or created
	// again) seen by the group's leader starts a rebalance.
	partitionWatchInterval = 5 * time.Second
	// coordinatorTimeout bounds each topic check, and each offset commit.
	coordinatorTimeout = 5 * time.Second
	// fetchMaxWait is the longest a fetch request waits at the broker for new records.
	fetchMaxWait = time.Second
	// pollMax bounds the records taken by one poll (all partitions together).
	pollMax = 10000
)

// Start offsets of a partition without a committed offset ([SubscriberConfig.StartOffset]).
const (
	FirstOffset int64 = -2 // the partition's first record
	LastOffset  int64 = -1 // after its last record: only records produced later
)

var _ message.Subscriber = (*Subscriber)(nil)

// SubscriberConfig configures a [Subscriber]. Brokers and GroupID are required; the
// other fields have defaults.
type SubscriberConfig struct {
	// Brokers are the bootstrap addresses (host:port) of the cluster. Required.
	Brokers []string
	// ClientID names the client to the brokers. Default [DefaultClientID].
	ClientID string
	// GroupID is the consumer group. Every topic subscribed through this Subscriber
	// joins this one group, as its own member. Required.
	GroupID string
	// Security is the connection's TLS and SASL; the zero value is plaintext, no auth.
	Security Security
	// MaxInFlight bounds, per partition, the records fetched and not yet committed:
	// handed out and awaiting Ack or Nack, or acked behind one that is not. When a
	// partition reaches it, fetching pauses (a record that is never acked stops its
	// partition after MaxInFlight more). Default [DefaultMaxInFlight] (1000).
	MaxInFlight int
	// SessionTimeout is how long the group coordinator waits for a heartbeat (or commit)
	// before it removes the member and rebalances. The brokers bound it (Kafka's minimum
	// is 6s by default). Default [DefaultSessionTimeout] (10s).
	SessionTimeout time.Duration
	// HeartbeatInterval is the time between heartbeats: a rebalance is noticed within it.
	// Must be below SessionTimeout. Default [DefaultHeartbeatInterval] (500ms).
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the coordinator waits for every member to rejoin
	// during a rebalance. Default [DefaultRebalanceTimeout] (30s).
	RebalanceTimeout time.Duration
	// DrainTimeout bounds the wait, when a partition is revoked or the subscription
	// ends, for the Ack or Nack of the records handed out; then contiguous acks are
	// committed and later acks of that partition are ignored (the next owner gets those
	// records again). Must be below SessionTimeout and RebalanceTimeout (no heartbeats
	// are sent meanwhile). Default [DefaultDrainTimeout] (5s).
	DrainTimeout time.Duration
	// NackResendDelay is the pause before a nacked record is handed out again.
	// Default [DefaultNackResendDelay] (100ms).
	NackResendDelay time.Duration
	// CommitInterval is the least time between two offset commits of a partition: acks
	// that come within it are committed together, at its end (the first ack after a
	// quiet spell is committed at once). A failed commit is retried at this pace too.
	// Default [DefaultCommitInterval] (100ms).
	CommitInterval time.Duration
	// StartOffset is where a partition without a committed offset for the group is
	// read from: [FirstOffset] (the default, so records produced before the group's
	// first start are not skipped) or [LastOffset].
	StartOffset int64
	// UUIDHeader, when set, is the record header whose value becomes the message UUID
	// (the header is then not metadata). Empty (the default), or a record without it: a
	// new ULID.
	UUIDHeader string
	// MissingTopicInterval is how often Subscribe looks again for a topic that does not
	// exist: the group is joined only once it does. Default
	// [DefaultMissingTopicInterval] (1m).
	MissingTopicInterval time.Duration
}

func (c SubscriberConfig) withDefaults() (SubscriberConfig, error) {
	if err := checkBrokers(c.Brokers); err != nil {
		return c, fmt.Errorf("kafka subscriber config: %w", err)
	}
	if c.GroupID == "" {
		return c, errors.New("kafka subscriber config: GroupID is required")
	}
	if c.MaxInFlight < 0 || c.SessionTimeout < 0 || c.HeartbeatInterval < 0 || c.RebalanceTimeout < 0 ||
		c.DrainTimeout < 0 || c.NackResendDelay < 0 || c.CommitInterval < 0 || c.MissingTopicInterval < 0 {
		return c, errors.New("kafka subscriber config: MaxInFlight and durations must not be negative")
	}
	defaultTo(&c.ClientID, DefaultClientID)
	defaultTo(&c.MaxInFlight, DefaultMaxInFlight)
	defaultTo(&c.SessionTimeout, DefaultSessionTimeout)
	defaultTo(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	defaultTo(&c.RebalanceTimeout, DefaultRebalanceTimeout)
	defaultTo(&c.DrainTimeout, DefaultDrainTimeout)
	defaultTo(&c.NackResendDelay, DefaultNackResendDelay)
	defaultTo(&c.CommitInterval, DefaultCommitInterval)
	defaultTo(&c.MissingTopicInterval, DefaultMissingTopicInterval)
	switch c.StartOffset {
	case 0:
		c.StartOffset = FirstOffset
	case FirstOffset, LastOffset:
	default:
		return c, fmt.Errorf("kafka subscriber config: StartOffset %d is neither FirstOffset (%d) nor LastOffset (%d)",
			c.StartOffset, FirstOffset, LastOffset)
	}
	if c.HeartbeatInterval >= c.SessionTimeout {
		return c, fmt.Errorf("kafka subscriber config: HeartbeatInterval %s must be below SessionTimeout %s", c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.DrainTimeout >= c.SessionTimeout || c.DrainTimeout >= c.RebalanceTimeout {
		return c, fmt.Errorf("kafka subscriber config: DrainTimeout %s must be below SessionTimeout %s and RebalanceTimeout %s",
			c.DrainTimeout, c.SessionTimeout, c.RebalanceTimeout)
	}
	return c, nil
}

// hooks observe partition consumers; set by tests only (export_test.go). Each is
// called from the partition's goroutine and must not block.
type hooks struct {
	// resolved follows the processing of an Ack or Nack.
	resolved func(topic string, partition int, offset int64, acked bool)
	// committed follows every offset commit attempt.
	committed func(topic string, partition int, offset int64, err error)
}

// Subscriber is a watermill message.Subscriber over franz-go's consumer group. It is
// safe for concurrent use.
//
// Each Subscribe joins the consumer group GroupID as one member subscribed to that
// topic (one franz-go client); the group's partitions of the topic are spread over its
// members (range assignment, the eager protocol), and a rebalance of the group (a member
// joins or leaves, partitions are added) pauses all of its members, as in any Kafka
// consumer group.
//
// Records are read read_committed: a record of an aborted transaction is never handed
// out, and one of an open transaction only once it commits. Per assigned partition,
// records are read from the committed offset (StartOffset without one) and handed out
// without waiting for the previous one's Ack (up to MaxInFlight per partition: then that
// partition alone stops being fetched), so the receiver can batch. The receiver acks or nacks
// each message:
//
//   - Ack: the offset is committed, synchronously (at most once per CommitInterval),
//     once every earlier record of the partition handed out in this generation is acked
//     too: the committed offset only moves over contiguous acked records, so a crash or
//     rebalance redelivers, never skips.
//   - Nack: the same record is handed out again after NackResendDelay (same UUID and
//     metadata); nothing after it is committed until it is acked. Messages are thus not
//     delivered in order across redeliveries.
//
// On a rebalance (or when the subscription ends) each partition stops handing out
// records, waits up to DrainTimeout for the Acks and Nacks of those handed out, commits
// what is contiguous and is released; an Ack that comes later does not count (the
// partition's next owner hands the record out again). Commits carry the generation, so
// the coordinator refuses those of a member that lost its partitions. A member that lost
// its partitions (its session expired) gives up the records handed out at once and
// commits nothing: their Acks count for nothing, and the new owner hands them out again.
//
// Every message carries metadata [headers.MetaSourceID] ("kafka:<topic>:<partition>:<offset>"),
// [headers.MetaKafkaKey] when the record has a key, and [MetaKafkaTimestamp].
type Subscriber struct {
	cfg   SubscriberConfig
	log   *slog.Logger
	hooks hooks

	mu     sync.Mutex // guards closed against wg.Add
	closed bool
	wg     sync.WaitGroup // subscriptions

	closeCtx    context.Context // cancelled by Close
	closeCancel context.CancelFunc
}

// NewSubscriber returns a Subscriber for the cluster at cfg.Brokers. It does not
// connect: each Subscribe does. logger (nil: discarded) gets a component attribute; the
// Subscriber logs per-message events at Debug only and never payloads.
func NewSubscriber(cfg SubscriberConfig, logger *slog.Logger) (*Subscriber, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriber{
		cfg:         cfg,
		log:         loggerOrDiscard(logger).With("component", "kafka.subscriber", "group", cfg.GroupID),
		closeCtx:    ctx,
		closeCancel: cancel,
	}, nil
}

// Subscribe joins the consumer group for topic and returns the channel of its
// messages. It returns at once: joining, and the assignment of partitions, happen in
// the background (and again after every rebalance); no record is missed meanwhile,
// since reading starts from the group's committed offsets (StartOffset for a partition
// without one).
//
// A topic that does not exist is named in a Warn line and looked for again every
// MissingTopicInterval; the group is joined only once it exists, so a missing topic
// never makes the group rebalance. While a member, the subscription refreshes the topic's
// metadata every 5 s, and the group rebalances when its partition count changes; a
// failed join is retried by franz-go with its backoff.
//
// The channel is closed when ctx is cancelled or Close is called, after the
// subscription has left the group: its partitions are drained (up to DrainTimeout)
// and their contiguous acks committed first. Every message's Context derives from ctx
// and is cancelled by its Ack or Nack, by ctx's cancellation, or when its partition is
// released (after a rebalance or Close).
//
// Fails on an empty topic, or after Close ([ErrClosed]).
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	sub := &subscription{s: s, topic: topic, out: make(chan *message.Message)}
	if err := s.start(ctx, sub); err != nil {
		return nil, err
	}
	return sub.out, nil
}

// start runs sub (its topic, and out or fast set) as Subscribe describes, in the
// background, until ctx ends or Close; then it closes sub's channel.
func (s *Subscriber) start(ctx context.Context, sub *subscription) error {
	topic := sub.topic
	if topic == "" {
		return errors.New("subscribe: empty topic")
	}
	log := s.log.With("topic", topic)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("subscribe to %s: subscriber %w", topic, ErrClosed)
	}
	s.wg.Add(1)
	s.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.closeCtx, cancel)
	sub.log = log
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer stopOnClose()
		defer sub.close()
		if !sub.awaitTopic(runCtx) {
			return
		}
		cl, err := kgo.NewClient(sub.clientOpts(runCtx)...)
		if err != nil {
			log.Error("kafka consumer group", "error", err)
			return
		}
		log.Info("joining kafka consumer group")
		sub.run(runCtx, cl)
	}()
	return nil
}

// subscription is one Subscribe (or SubscribeReceived) call: one member of the group.
// It hands out watermill messages on out, or, when fast is set, headers.Received on fast.
type subscription struct {
	s     *Subscriber
	topic string
	out   chan *message.Message
	fast  chan *headers.Received
	log   *slog.Logger

	mu    sync.Mutex // guards parts: the poller reads it, the group's callbacks change it
	parts map[int32]*partitionConsumer
	// pcs are the running partition consumers' goroutines.
	pcs sync.WaitGroup
}

// close closes the channel sub hands out on.
func (sub *subscription) close() {
	if sub.fast != nil {
		close(sub.fast)
		return
	}
	close(sub.out)
}

// awaitTopic returns true once the topic exists (or cannot be checked: the group then
// reports its own errors), false when ctx ends first. A missing topic is logged at Warn
// once, then looked for every MissingTopicInterval.
func (sub *subscription) awaitTopic(ctx context.Context) bool {
	every := sub.s.cfg.MissingTopicInterval
	missing := false
	for {
		cctx, cancel := context.WithTimeout(ctx, coordinatorTimeout)
		_, err := Partitions(cctx, sub.s.cfg.Brokers, sub.s.cfg.Security, sub.topic)
		cancel()
		switch {
		case ctx.Err() != nil:
			return false
		case err == nil && missing:
			sub.log.Info("kafka topic exists now: joining its consumer group")
			return true
		case !errors.Is(err, ErrUnknownTopic):
			if err != nil {
				sub.log.Debug("kafka topic check", "error", err)
			}
			return true
		case !missing:
			missing = true
			sub.log.Warn("kafka topic does not exist: not read until it does; looked for again periodically",
				"every", every.String())
		default:
			sub.log.Debug("kafka topic still missing")
		}
		if !backoff.Sleep(ctx, every) {
			return false
		}
	}
}

// clientOpts are the options of the subscription's client: a member of the group that
// consumes the topic, commits only what the partition consumers commit, and lets the
// group rebalance only between polls (BlockRebalanceOnPoll), so that every record polled
// reaches its partition consumer before that partition can be revoked.
func (sub *subscription) clientOpts(runCtx context.Context) []kgo.Opt {
	c := &sub.s.cfg
	reset := kgo.NewOffset().AtStart()
	if c.StartOffset == LastOffset {
		reset = kgo.NewOffset().AtEnd()
	}
	return append(ClientOpts(c.Brokers, c.ClientID, c.Security),
		kgo.WithLogger(kgoLogger{sub.log}),
		kgo.ConsumerGroup(c.GroupID),
		kgo.ConsumeTopics(sub.topic),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(c.SessionTimeout),
		kgo.HeartbeatInterval(c.HeartbeatInterval),
		kgo.RebalanceTimeout(c.RebalanceTimeout),
		kgo.ConsumeResetOffset(reset),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.MetadataMaxAge(partitionWatchInterval),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
			sub.assigned(runCtx, cl, assigned[sub.topic])
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, _ map[string][]int32) {
			sub.release(cl, false)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, _ map[string][]int32) {
			sub.release(cl, true)
		}),
	)
}

// run polls the group's records until ctx is done and hands each partition's records to
// its consumer; then it leaves the group (the caller closes out).
func (sub *subscription) run(ctx context.Context, cl *kgo.Client) {
	defer func() {
		// Revokes the partitions (they drain and commit), then leaves the group. Blocks
		// until then.
		cl.Close()
		sub.pcs.Wait()
		sub.log.Info("left kafka consumer group")
	}()
	streak := backoff.Streak{Log: sub.log} // logged once at Warn, then quietly retried
	for {
		fs := cl.PollRecords(ctx, pollMax)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return
		}
		failed := false
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			failed = true
			streak.Failed(ctx, "kafka fetch, retrying", "partition", p, "error", err)
		})
		if !failed {
			streak.Reset()
		}
		sub.mu.Lock()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			if pc := sub.parts[p.Partition]; pc != nil {
				pc.feed(p.Records)
			}
		})
		sub.mu.Unlock()
		cl.AllowRebalance()
	}
}

// assigned starts the consumers of the partitions the group gave this member.
func (sub *subscription) assigned(runCtx context.Context, cl *kgo.Client, partitions []int32) {
	sub.log.Info("kafka consumer group generation", "partitions", partitions)
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.parts == nil {
		sub.parts = map[int32]*partitionConsumer{}
	}
	for _, p := range partitions {
		if sub.parts[p] != nil {
			continue
		}
		pc := newPartitionConsumer(sub, cl, p)
		sub.parts[p] = pc
		sub.pcs.Add(1)
		go func() {
			defer sub.pcs.Done()
			pc.run(runCtx)
		}()
	}
}

// release ends every partition consumer (a rebalance revokes the partitions, or they
// were lost) and waits for them: revoked, each drains and commits within the
// generation; lost, each gives its records up at once and commits nothing. Then every
// partition it had paused is resumed, for the next owner (possibly this member).
func (sub *subscription) release(cl *kgo.Client, lost bool) {
	sub.mu.Lock()
	parts := sub.parts
	sub.parts = nil
	sub.mu.Unlock()
	for _, pc := range parts {
		pc.end(lost)
	}
	paused := make([]int32, 0, len(parts))
	for p, pc := range parts {
		<-pc.ended
		paused = append(paused, p)
	}
	if len(paused) > 0 {
		cl.ResumeFetchPartitions(map[string][]int32{sub.topic: paused})
	}
}

// Close ends every subscription: each one's partitions drain (up to DrainTimeout) and
// commit their contiguous acks, the member leaves the group, and its channel is closed.
// Close then returns, having waited for every goroutine of the Subscriber. It can take
// up to DrainTimeout, longer when a rebalance is under way (a join in progress is
// awaited, bounded by RebalanceTimeout). Idempotent and safe to call concurrently;
// always returns nil.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeCancel()
	s.wg.Wait()
	return nil
}
