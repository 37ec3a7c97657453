package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// ErrClosed is returned by Publish and Subscribe after Close.
var ErrClosed = errors.New("closed")

// DefaultClientID is the client id sent to the brokers when none is configured.
const DefaultClientID = "delaybridge"

// dialTimeout bounds establishing one broker connection.
const dialTimeout = 10 * time.Second

// pingTimeout bounds a [Ping] whose context has no deadline.
const pingTimeout = 5 * time.Second

// Ping reports whether the cluster answers: it connects to the brokers in turn until
// one answers a metadata request, and returns nil then, else the last error. It opens
// and closes one connection per broker tried; ctx (or, without a deadline, 5 s) bounds
// the whole call. Meant for readiness probes.
func Ping(ctx context.Context, brokers []string) error {
	return PingWith(ctx, brokers, Security{})
}

// PingWith is [Ping] over the connection security sec (TLS, SASL).
func PingWith(ctx context.Context, brokers []string, sec Security) error {
	if err := checkBrokers(brokers); err != nil {
		return fmt.Errorf("kafka ping: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pingTimeout)
		defer cancel()
	}
	d := NewDialer(DefaultClientID, sec)
	var err error
	for _, b := range brokers {
		if err = pingOne(ctx, d, b); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("kafka ping: %w", err)
}

func pingOne(ctx context.Context, d *kafkago.Dialer, broker string) error {
	conn, err := d.DialContext(ctx, "tcp", broker)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) }) // cancel unblocks
	defer stop()
	if _, err := conn.Brokers(); err != nil {
		return fmt.Errorf("%s: %w", broker, err)
	}
	return nil
}

// The connection set-up lives here, shared by the publisher (a kafka-go Transport), the
// subscriber (a kafka-go Dialer) and `bridge redrive` (both), so that TLS and SASL
// ([Security]) are added in one place.

// NewTransport returns a kafka-go Transport (Writer, Client) over sec.
func NewTransport(clientID string, sec Security) *kafkago.Transport {
	return &kafkago.Transport{ClientID: clientID, DialTimeout: dialTimeout, TLS: sec.TLS, SASL: sec.SASL}
}

// NewDialer returns a kafka-go Dialer (Reader, Conn) over sec.
func NewDialer(clientID string, sec Security) *kafkago.Dialer {
	return &kafkago.Dialer{ClientID: clientID, Timeout: dialTimeout, DualStack: true, TLS: sec.TLS, SASLMechanism: sec.SASL}
}

func checkBrokers(brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("no brokers")
	}
	for _, b := range brokers {
		if b == "" {
			return errors.New("empty broker address")
		}
	}
	return nil
}

// kafkaLogger turns kafka-go's printf logging into Debug records on log: kafka-go logs
// every retry, and the adapter reports what matters itself.
func kafkaLogger(log *slog.Logger) kafkago.Logger {
	return kafkago.LoggerFunc(func(format string, args ...any) {
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("kafka-go: " + fmt.Sprintf(format, args...))
		}
	})
}

func loggerOrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// ErrUnknownTopic is returned (wrapped) by [Partitions] for a topic the cluster does not
// have.
var ErrUnknownTopic = errors.New("unknown topic")

// Partitions returns how many partitions topic has, asking the brokers in turn (one
// connection each, closed after) until one answers; a missing topic is [ErrUnknownTopic].
// Like any Kafka client's metadata request, it lets brokers with
// auto.create.topics.enable create the topic. ctx (or, without a deadline, 5 s) bounds
// the call.
func Partitions(ctx context.Context, brokers []string, sec Security, topic string) (int, error) {
	if err := checkBrokers(brokers); err != nil {
		return 0, fmt.Errorf("kafka topic %s: %w", topic, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pingTimeout)
		defer cancel()
	}
	return partitionCount(ctx, NewDialer(DefaultClientID, sec), brokers, topic)
}

func partitionCount(ctx context.Context, d *kafkago.Dialer, brokers []string, topic string) (int, error) {
	var err error
	for _, b := range brokers {
		var n int
		if n, err = partitionsOne(ctx, d, b, topic); err == nil {
			return n, nil
		}
		if errors.Is(err, ErrUnknownTopic) || ctx.Err() != nil {
			break
		}
	}
	return 0, fmt.Errorf("kafka topic %s: %w", topic, err)
}

func partitionsOne(ctx context.Context, d *kafkago.Dialer, broker, topic string) (int, error) {
	conn, err := d.DialContext(ctx, "tcp", broker)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return 0, err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) }) // cancel unblocks
	defer stop()
	ps, err := conn.ReadPartitions(topic)
	if errors.Is(err, kafkago.UnknownTopicOrPartition) || (err == nil && len(ps) == 0) {
		return 0, fmt.Errorf("%w (%s)", ErrUnknownTopic, broker)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", broker, err)
	}
	return len(ps), nil
}
