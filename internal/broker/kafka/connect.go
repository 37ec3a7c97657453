package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// ErrClosed is returned by Publish and Subscribe after Close.
var ErrClosed = errors.New("closed")

// DefaultClientID is the client id sent to the brokers when none is configured.
const DefaultClientID = "delaybridge"

// dialTimeout bounds establishing one broker connection.
const dialTimeout = 10 * time.Second

// pingTimeout bounds a [Ping] whose context has no deadline.
const pingTimeout = 5 * time.Second

// The connection set-up lives here, shared by the publisher, the subscriber and
// `bridge redrive`, so that TLS and SASL ([Security]) are added in one place.

// ClientOpts returns the franz-go options that reach the cluster at brokers as clientID
// over sec (TLS, SASL), every client of the bridge's starts from: the caller adds what
// its role needs (group, topics, producer settings). Every fetch is read_committed:
// records of aborted transactions are never returned, and those of an open transaction
// only once it commits.
func ClientOpts(brokers []string, clientID string, sec Security) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID),
		kgo.DialTimeout(dialTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}
	if sec.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(sec.TLS))
	}
	if sec.SASL != nil {
		opts = append(opts, kgo.SASL(sec.SASL))
	}
	return opts
}

// AdminVersions caps the versions of the offset requests that callers build by hand
// (kmsg OffsetCommit, OffsetFetch) below those that name topics by id only: pass it as
// kgo.MaxVersions to a client that sends such requests with topic names.
func AdminVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.OffsetCommit), 9)
	v.SetMaxKeyVersion(int16(kmsg.OffsetFetch), 9)
	return v
}

// Ping reports whether the cluster answers: it asks the brokers in turn, once each, for
// their metadata and returns nil once one answers, else the last error (at once when one
// refused the credentials). It opens and closes one connection per broker tried; ctx
// (or, without a deadline, 5 s) bounds the whole call. Meant for readiness probes.
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
	var err error
	for _, b := range brokers {
		if err = pingOne(ctx, b, sec); err == nil {
			return nil
		}
		if ctx.Err() != nil || IsAuthError(err) {
			break
		}
	}
	return fmt.Errorf("kafka ping: %w", err)
}

// pingOne asks broker alone for the cluster's brokers, once: a failure is not retried.
func pingOne(ctx context.Context, broker string, sec Security) error {
	var refused saslRefused
	cl, err := kgo.NewClient(append(ClientOpts([]string{broker}, DefaultClientID, sec),
		kgo.WithHooks(&refused), kgo.RequestRetries(0))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none: only the brokers
	if _, err := req.RequestWith(ctx, cl); err != nil {
		if refused.Load() {
			return fmt.Errorf("%s: %w: %w", broker, ErrSASLRefused, err)
		}
		return fmt.Errorf("%s: %w", broker, err)
	}
	return nil
}

// ErrSASLRefused is returned (wrapped) by [PingWith] when a broker closed the connection
// instead of answering the SASL authentication: how brokers without an error code for it
// (and kfake) refuse credentials. [IsAuthError] counts it.
var ErrSASLRefused = errors.New("connection closed during SASL authentication")

// saslRefused is a franz-go hook that notes a SASL authentication whose answer could
// not be read.
type saslRefused struct{ atomic.Bool }

func (h *saslRefused) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil && key == int16(kmsg.SASLAuthenticate) {
		h.Store(true)
	}
}

// kgoLogger turns franz-go's logging into Debug records on log: franz-go logs every
// retry, and the adapter reports what matters itself.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelNone
}

func (l kgoLogger) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	l.log.Debug("franz-go: "+msg, keyvals...)
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

func loggerOrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// ErrUnknownTopic is returned (wrapped) by [Partitions] for a topic the cluster does not
// have.
var ErrUnknownTopic = errors.New("unknown topic")

// Partitions returns how many partitions topic has, in one metadata request (franz-go
// tries the brokers in turn); a missing topic is [ErrUnknownTopic]. Like any Kafka
// client's metadata request, it lets brokers with auto.create.topics.enable create the
// topic. ctx (or, without a deadline, 5 s) bounds the call.
func Partitions(ctx context.Context, brokers []string, sec Security, topic string) (int, error) {
	if err := checkBrokers(brokers); err != nil {
		return 0, fmt.Errorf("kafka topic %s: %w", topic, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pingTimeout)
		defer cancel()
	}
	cl, err := kgo.NewClient(ClientOpts(brokers, DefaultClientID, sec)...)
	if err != nil {
		return 0, fmt.Errorf("kafka topic %s: %w", topic, err)
	}
	defer cl.Close()
	return partitionCount(ctx, cl, topic)
}

// partitionCount is [Partitions] over the client cl.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = true
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("kafka topic %s: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return 0, fmt.Errorf("kafka topic %s: %d topics in the metadata answer", topic, len(resp.Topics))
	}
	t := resp.Topics[0]
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return 0, fmt.Errorf("kafka topic %s: %w", topic, ErrUnknownTopic)
		}
		return 0, fmt.Errorf("kafka topic %s: %w", topic, err)
	}
	if len(t.Partitions) == 0 {
		return 0, fmt.Errorf("kafka topic %s: %w", topic, ErrUnknownTopic)
	}
	return len(t.Partitions), nil
}
