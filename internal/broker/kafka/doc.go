// Package kafka is delaybridge's watermill adapter for Kafka: a [Publisher] and a
// [Subscriber] over franz-go (github.com/twmb/franz-go/pkg/kgo).
//
// Publishing: all messages of one Publish call are produced at once and awaited, with
// acks from all in-sync replicas, idempotently (a produce request sent again after a lost
// answer is written once), partitioned by record key (murmur2, as Java's default
// partitioner). Publish returns when every record is acknowledged; per-message failures
// come back as a [*broker.PublishError]. A Publish that failed as a whole and is made
// again writes new records.
//
// Subscribing: each Subscribe is one member of the consumer group (a franz-go client with
// manual commits), reading read_committed: records of aborted transactions are never
// handed out. Records are handed out without waiting for the previous Ack (bounded per
// partition: a full partition alone is paused), and a partition's offset is committed,
// synchronously and within the generation, only over contiguous acked records: never
// past a record that was nacked or not yet acked. A Nack hands the same record out
// again. On a rebalance a partition stops handing out records, waits (bounded) for the
// outstanding Acks, commits and is released; a later Ack is ignored, and the next owner
// hands the record out again. A lost partition commits nothing. Delivery is at least
// once; duplicates come with rebalances, restarts and Nacks.
//
// Headers: Kafka headers may repeat, watermill metadata is a map. The mapping is
// [headers.ToMetadata] / [headers.FromMetadata]: repeated values keep their order,
// header names keep their case, and metadata keys with the reserved prefix
// `_delaybridge_` never go on the wire. A header with that prefix that arrives from it is
// kept inside [headers.MetaHeaders], never taken as the adapter's own metadata (intake
// refuses it). A null header value is "" in metadata; [Subscriber.SubscribeReceived]
// and [Publisher.PublishList] keep it null (headers.Header.Null). The
// record key travels as metadata [headers.MetaKafkaKey], the record's identity as
// [headers.MetaSourceID] ("kafka:<topic>:<partition>:<offset>") and its timestamp as
// [MetaKafkaTimestamp]. The message UUID goes on the wire only when a UUID header is
// configured.
//
// [Ping] checks that the cluster answers, for readiness probes.
package kafka
