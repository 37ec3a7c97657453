package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/httpapi/api"
	"github.com/delaybridge/delaybridge/httpapi/ops"
	"github.com/delaybridge/delaybridge/ingress"
	"github.com/delaybridge/delaybridge/ingress/intake"
	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	natsbroker "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/connect"
	"github.com/delaybridge/delaybridge/internal/redrive"
	"github.com/delaybridge/delaybridge/internal/subject"
)

// brokerSide is one broker as the bridge uses it: its publisher (egress, dead letters),
// its ingress sources (delayed messages and cancels), its readiness check, and how to
// close it all.
type brokerSide struct {
	name      string // "nats" or "kafka"
	publisher message.Publisher
	sources   []ingress.Source
	check     ops.Check
	// maxPayload is NATS's max_payload as the connection knows it now (nil for Kafka).
	maxPayload func() int64
	// deadLetters is its dead-letter store for the message API.
	deadLetters api.DeadLetters
	// closers run in reverse order at shutdown: subscriber, publisher, connection.
	closers []func()
}

// close closes the side: the last opened first.
func (s *brokerSide) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// openSides opens the configured broker sides, NATS first. On error the sides opened so
// far are returned with it, to be closed by the caller.
func openSides(ctx context.Context, cfg config.Config, logger *slog.Logger) ([]*brokerSide, error) {
	var sides []*brokerSide
	if cfg.NATS.URL != "" {
		s, err := natsSide(ctx, cfg, logger)
		if s != nil {
			sides = append(sides, s)
		}
		if err != nil {
			return sides, err
		}
	}
	if len(cfg.Kafka.Brokers) > 0 {
		s, err := kafkaSide(ctx, cfg, logger)
		if s != nil {
			sides = append(sides, s)
		}
		if err != nil {
			return sides, err
		}
	}
	return sides, nil
}

// natsSide connects to NATS and builds its publisher and subscriber. A non-nil side is
// returned with an error too, holding what was opened.
func natsSide(ctx context.Context, cfg config.Config, logger *slog.Logger) (*brokerSide, error) {
	natsOpts, err := connect.NATSOptions(cfg.NATS)
	if err != nil {
		return nil, err
	}
	nc, err := natsbroker.Connect(ctx, cfg.NATS.URL, "delaybridge", logger, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	s := &brokerSide{name: "nats", maxPayload: nc.MaxPayload,
		deadLetters: redrive.NATSLetters{Conn: nc, Config: RedriveNATS(cfg)}}
	s.closers = append(s.closers, func() {
		if err := nc.Drain(); err != nil {
			nc.Close()
		}
	})
	if err := checkIngressStream(ctx, nc, cfg.NATS); err != nil {
		return s, err
	}
	pub, err := natsbroker.NewPublisher(nc, natsbroker.PublisherConfig{}, logger)
	if err != nil {
		return s, fmt.Errorf("nats publisher: %w", err)
	}
	s.closers = append(s.closers, func() { _ = pub.Close() })
	consumer := cfg.NATS.Consumer
	sub, err := natsbroker.NewSubscriber(nc, natsbroker.SubscriberConfig{
		Stream:      cfg.NATS.Stream,
		Queue:       cfg.NATS.Queue,
		AckWait:     cfg.NATS.AckWait,
		MaxProgress: cfg.NATS.MaxProgress,
		ConsumerName: func(topic string) string {
			if topic == cfg.NATS.Subject {
				return consumer
			}
			return consumer + "-cancel"
		},
	}, logger)
	if err != nil {
		return s, fmt.Errorf("nats subscriber: %w", err)
	}
	s.closers = append(s.closers, func() { _ = sub.Close() })
	s.publisher = pub
	s.sources = []ingress.Source{
		{Broker: "nats", Topic: cfg.NATS.Subject, Kind: ingress.Delayed, Subscriber: sub},
		{Broker: "nats", Topic: cfg.CancelSubject, Kind: ingress.Cancels, Subscriber: sub}}
	s.check = ops.Check{Name: "nats", Probe: func(context.Context) error {
		if st := nc.Status(); st != natsgo.CONNECTED {
			return fmt.Errorf("connection %s", st)
		}
		return nil
	}}
	return s, nil
}

// kafkaSide checks the Kafka credentials once and builds the publisher and the group
// subscriber. A non-nil side is returned with an error too, holding what was opened.
func kafkaSide(ctx context.Context, cfg config.Config, logger *slog.Logger) (*brokerSide, error) {
	kafkaSec, err := connect.KafkaSecurity(cfg.Kafka)
	if err != nil {
		return nil, err
	}
	if err := connect.CheckKafkaAuth(ctx, cfg.Kafka.Brokers, kafkaSec); err != nil {
		return nil, fmt.Errorf("kafka refused the bridge's credentials (check BRIDGE_KAFKA_SASL_*): %w", err)
	}
	pub, err := kafkabroker.NewPublisher(kafkabroker.PublisherConfig{
		Brokers:  cfg.Kafka.Brokers,
		Security: kafkaSec,
		// As a Java producer: the broker's auto.create.topics.enable decides.
		AllowAutoTopicCreation: true,
		MaxRecordBytes:         kafkaRecordLimit(cfg.Kafka.MaxMessageBytes),
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher: %w", err)
	}
	s := &brokerSide{name: "kafka", publisher: pub, deadLetters: redrive.KafkaLetters{Config: RedriveKafka(cfg, kafkaSec)}}
	s.closers = append(s.closers, func() { _ = pub.Close() })
	if err := checkIngressTopic(ctx, cfg.Kafka, kafkaSec); err != nil {
		return s, err
	}
	warnMissingDLQTopic(ctx, cfg, kafkaSec, logger)
	// The cancel topic has its own group: its rebalances (a member joins, the topic is
	// created late) never pause the ingress topic; a missing one is waited for.
	subs := make([]*kafkabroker.Subscriber, 2)
	for i, group := range []string{cfg.Kafka.Group, kafkabroker.CancelGroup(cfg.Kafka.Group)} {
		sub, err := kafkabroker.NewSubscriber(kafkabroker.SubscriberConfig{Brokers: cfg.Kafka.Brokers, GroupID: group,
			Security: kafkaSec, MissingTopicInterval: cfg.Kafka.MissingTopicInterval}, logger)
		if err != nil {
			return s, fmt.Errorf("kafka subscriber: %w", err)
		}
		s.closers = append(s.closers, func() { _ = sub.Close() })
		subs[i] = sub
	}
	s.sources = []ingress.Source{
		{Broker: "kafka", Topic: cfg.Kafka.Topic, Kind: ingress.Delayed, Subscriber: subs[0]},
		{Broker: "kafka", Topic: cfg.CancelSubject, Kind: ingress.Cancels, Subscriber: subs[1]}}
	brokers := cfg.Kafka.Brokers
	s.check = ops.Check{Name: "kafka", Probe: func(ctx context.Context) error {
		return kafkabroker.PingWith(ctx, brokers, kafkaSec)
	}}
	return s, nil
}

// checkIngressStream: with BRIDGE_NATS_STREAM set, the stream must exist and capture the
// ingress subject (the bridge never creates or alters streams).
func checkIngressStream(ctx context.Context, nc *natsgo.Conn, cfg config.NATS) error {
	if cfg.Stream == "" {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(sctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("BRIDGE_NATS_STREAM: jetstream stream %q not found: create it (capturing %q); the bridge never creates streams", cfg.Stream, cfg.Subject)
	}
	if err != nil {
		return fmt.Errorf("BRIDGE_NATS_STREAM %q: %w", cfg.Stream, err)
	}
	for _, subj := range st.CachedInfo().Config.Subjects {
		if subject.Matches(subj, cfg.Subject) {
			return nil
		}
	}
	return fmt.Errorf("BRIDGE_NATS_STREAM: stream %q does not capture BRIDGE_NATS_SUBJECT %q (its subjects: %s)",
		cfg.Stream, cfg.Subject, strings.Join(st.CachedInfo().Config.Subjects, ", "))
}

// checkIngressTopic: the Kafka ingress topic must exist (the bridge never creates it; a
// broker with auto.create.topics.enable creates it on this check, as for any consumer).
func checkIngressTopic(ctx context.Context, cfg kafkabroker.Config, sec kafkabroker.Security) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := kafkabroker.Partitions(cctx, cfg.Brokers, sec, cfg.Topic)
	if errors.Is(err, kafkabroker.ErrUnknownTopic) {
		return fmt.Errorf("BRIDGE_KAFKA_TOPIC: kafka topic %q not found: create it; the bridge never creates its ingress topic", cfg.Topic)
	}
	if err != nil {
		return fmt.Errorf("BRIDGE_KAFKA_TOPIC %q: %w", cfg.Topic, err)
	}
	return nil
}

// warnMissingDLQTopic names a missing Kafka dead-letter topic (BRIDGE_DLQ_SUBJECT) in a
// warning: the bridge starts anyway (a broker with auto.create.topics.enable creates it
// on this check, as on the first dead letter), but until it exists each invalid record
// waits unacked, holding its partition's commit point (the other partitions go on).
// Any other failure of the check is left to the dead-letter publishes to report.
func warnMissingDLQTopic(ctx context.Context, cfg config.Config, sec kafkabroker.Security, logger *slog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := kafkabroker.Partitions(cctx, cfg.Kafka.Brokers, sec, cfg.DLQSubject); errors.Is(err, kafkabroker.ErrUnknownTopic) {
		logger.Warn("BRIDGE_DLQ_SUBJECT: kafka dead-letter topic not found: create it; until it exists each invalid record waits unacked and holds its partition (nothing committed past it; other partitions go on)",
			"component", "bridge", "topic", cfg.DLQSubject)
	}
}

// kafkaBatchOverhead is what a broker counts against message.max.bytes beyond the
// records kafka-go counts against its batch limit: the record batch header (61 bytes),
// rounded up.
const kafkaBatchOverhead = 128

// kafkaRecordLimit is the largest record the bridge sends to a Kafka broker whose
// message.max.bytes is maxMessageBytes (BRIDGE_KAFKA_MAX_MESSAGE_BYTES): the producer's
// batch limit and ingress's check, so that a full batch still fits the broker's limit.
func kafkaRecordLimit(maxMessageBytes int) int {
	return maxMessageBytes - kafkaBatchOverhead
}

// brokerLimits is ingress's view of the target brokers' size limits: NATS's
// max_payload as the connection knows it now, Kafka's BRIDGE_KAFKA_MAX_MESSAGE_BYTES.
func brokerLimits(natsMaxPayload func() int64, kafkaMax int) intake.SizeLimits {
	return intake.SizeLimitsFunc(func(broker string) int64 {
		switch broker {
		case intake.BrokerNATS:
			return natsMaxPayload()
		case intake.BrokerKafka:
			return int64(kafkaMax)
		}
		return 0
	})
}

func targetPolicy(cfg config.Config) intake.TargetPolicy {
	p := intake.TargetPolicy{Brokers: map[string]bool{}, Allow: cfg.TargetAllow, Own: map[string][]string{}}
	if cfg.NATS.URL != "" {
		p.Brokers["nats"] = true
		p.Own["nats"] = []string{cfg.NATS.Subject, cfg.CancelSubject, cfg.DLQSubject}
	}
	if len(cfg.Kafka.Brokers) > 0 {
		p.Brokers["kafka"] = true
		p.Own["kafka"] = []string{cfg.Kafka.Topic, cfg.CancelSubject, cfg.DLQSubject}
	}
	return p
}
