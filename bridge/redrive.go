package bridge

import (
	"github.com/delaybridge/delaybridge/config"
	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/redrive"
)

// RedriveNATS is where the NATS dead letters are and go, from the bridge's configuration:
// one mapping for `bridge redrive` and the message API's dead letters.
func RedriveNATS(cfg config.Config) redrive.NATSConfig {
	return redrive.NATSConfig{DLQSubject: cfg.DLQSubject, Ingress: cfg.NATS.Subject, IngressStream: cfg.NATS.Stream}
}

// RedriveKafka is where the Kafka dead letters are and go (the group
// `<BRIDGE_KAFKA_GROUP>-redrive`), from the bridge's configuration: one mapping for
// `bridge redrive` and the message API's dead letters.
func RedriveKafka(cfg config.Config, sec kafkabroker.Security) redrive.KafkaConfig {
	return redrive.KafkaConfig{Brokers: cfg.Kafka.Brokers, Security: sec, DLQTopic: cfg.DLQSubject,
		Ingress: cfg.Kafka.Topic, Group: cfg.Kafka.Group + "-redrive"}
}
