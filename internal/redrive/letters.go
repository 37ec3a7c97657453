package redrive

import (
	"context"

	natsgo "github.com/nats-io/nats.go"
)

// NATSLetters is the dead-letter store of the NATS side, for the message API
// (GET /v1/dead-letters, POST /v1/dead-letters/redrive): the same reads and runs as
// `bridge redrive`. Safe for concurrent use (runs at once are kept apart by the claims
// bucket).
type NATSLetters struct {
	Conn   *natsgo.Conn
	Config NATSConfig
}

// List reads one page (ListNATS).
func (n NATSLetters) List(ctx context.Context, q ListQuery) (Page, error) {
	return ListNATS(ctx, n.Conn, n.Config, q)
}

// Redrive runs a redrive (NATS).
func (n NATSLetters) Redrive(ctx context.Context, opts Options) (Counts, error) {
	return NATS(ctx, n.Conn, n.Config, opts)
}

// Get opens one letter (GetNATS).
func (n NATSLetters) Get(ctx context.Context, id string) (Detail, error) {
	return GetNATS(ctx, n.Conn, n.Config, id)
}

// CanPurge is nil: NATS letters can be deleted (the stream must allow deletes).
func (NATSLetters) CanPurge() error { return nil }

// Purge deletes the selected letters (PurgeNATS).
func (n NATSLetters) Purge(ctx context.Context, opts Options) (Counts, error) {
	return PurgeNATS(ctx, n.Conn, n.Config, opts)
}

// CheckID reports whether id is a NATS dead letter's id (ParseNATSID).
func (NATSLetters) CheckID(id string) error {
	_, err := ParseNATSID(id)
	return err
}

// KafkaLetters is the dead-letter store of the Kafka side, for the message API: the same
// reads and runs as `bridge redrive`. Safe for concurrent use (runs at once are kept apart
// by the consumer group).
type KafkaLetters struct {
	Config KafkaConfig
}

// List reads one page (ListKafka).
func (k KafkaLetters) List(ctx context.Context, q ListQuery) (Page, error) {
	return ListKafka(ctx, k.Config, q)
}

// Redrive runs a redrive (Kafka).
func (k KafkaLetters) Redrive(ctx context.Context, opts Options) (Counts, error) {
	cfg := k.Config
	cfg.FromStart = false // never from the API
	return Kafka(ctx, cfg, opts)
}

// Get opens one letter (GetKafka).
func (k KafkaLetters) Get(ctx context.Context, id string) (Detail, error) {
	return GetKafka(ctx, k.Config, id)
}

// CanPurge is ErrPurgeKafka.
func (KafkaLetters) CanPurge() error { return ErrPurgeKafka }

// Purge is refused: ErrPurgeKafka.
func (KafkaLetters) Purge(context.Context, Options) (Counts, error) {
	return Counts{}, ErrPurgeKafka
}

// CheckID reports whether id is a Kafka dead letter's id (ParseKafkaID).
func (KafkaLetters) CheckID(id string) error {
	_, _, err := ParseKafkaID(id)
	return err
}
