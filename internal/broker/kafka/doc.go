// Package kafka is delaybridge's watermill adapter for Kafka: a [Publisher] and a
// [Subscriber] over github.com/segmentio/kafka-go.
//
// Publishing: all messages of one Publish call go to kafka-go in one WriteMessages
// call, with acks from all in-sync replicas, partitioned by record key (murmur2, as
// Java's default partitioner). Publish returns when every record is acknowledged;
// per-message failures come back as a [*broker.PublishError]. kafka-go has no idempotent
// producer, so a retried Publish may write a record twice.
//
// Subscribing: each Subscribe is a member of the consumer group, driven through
// kafka-go's explicit group API (ConsumerGroup, Generation) rather than its Reader, so
// that the adapter owns the offsets. Records are handed out without waiting for the
// previous Ack (bounded per partition), and a partition's offset is committed,
// synchronously and within the generation, only over contiguous acked records: never
// past a record that was nacked or not yet acked. A Nack hands the same record out
// again. On a rebalance a partition stops handing out records, waits (bounded) for the
// outstanding Acks, commits and is released; a later Ack is ignored, and the next owner
// hands the record out again. Delivery is at least once; duplicates come with
// rebalances, restarts and Nacks.
//
// Headers: Kafka headers may repeat, watermill metadata is a map. The mapping is
// [headers.ToMetadata] / [headers.FromMetadata]: repeated values keep their order,
// header names keep their case, and metadata keys with the reserved prefix
// `_delaybridge_` never go on the wire (and are dropped when they arrive from it). The
// record key travels as metadata [headers.MetaKafkaKey], the record's identity as
// [headers.MetaSourceID] ("kafka:<topic>:<partition>:<offset>") and its timestamp as
// [MetaKafkaTimestamp]. The message UUID goes on the wire only when a UUID header is
// configured.
//
// [Ping] checks that the cluster answers, for readiness probes.
package kafka
