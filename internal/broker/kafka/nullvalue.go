package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"

	kafkago "github.com/segmentio/kafka-go"
)

// nullProbeMaxBytes is the fetch size of a null-value probe: a broker returns at least
// the first record batch at the offset, whatever its size.
const nullProbeMaxBytes = 1 << 20

// nullValue reports whether the record of topic/partition at offset has a null value (a
// tombstone). kafka-go's Reader hands out a null value and an empty one alike as a nil
// Value; its lower-level Fetch (through the Subscriber's Transport) keeps them apart. It
// costs one fetch round trip, paid only for records whose Value came back nil.
func (s *Subscriber) nullValue(ctx context.Context, topic string, partition int, offset int64) (bool, error) {
	cl := &kafkago.Client{Addr: kafkago.TCP(s.cfg.Brokers...), Transport: s.transport, Timeout: coordinatorTimeout}
	res, err := cl.Fetch(ctx, &kafkago.FetchRequest{Topic: topic, Partition: partition, Offset: offset,
		MinBytes: 1, MaxBytes: nullProbeMaxBytes, MaxWait: fetchMaxWait, IsolationLevel: kafkago.ReadCommitted})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return false, fmt.Errorf("probe value of %s/%d@%d: %w", topic, partition, offset, err)
	}
	if c, ok := res.Records.(io.Closer); ok {
		defer c.Close()
	}
	for {
		r, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return false, fmt.Errorf("probe value of %s/%d@%d: record not in the response", topic, partition, offset)
		}
		if err != nil {
			return false, fmt.Errorf("probe value of %s/%d@%d: %w", topic, partition, offset, err)
		}
		if r.Offset == offset {
			return r.Value == nil, nil
		}
	}
}
