package main

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/delaybridge/delaybridge/config"
)

// devKafkaDemo is the topic the banner's kcat round trip goes to, created at the start
// so that a consumer can wait on it before the first message arrives.
const devKafkaDemo = "demo.hello"

// devKafkaPort is the port `bridge dev --kafka` asks for its Kafka stand-in (a free one
// when taken).
const devKafkaPort = 9092

// startDevKafka starts the Kafka-protocol stand-in of `bridge dev --kafka`: one kfake
// broker (franz-go's in-memory broker, the one the compose stack's kafka-standin runs) on
// 127.0.0.1:port (a free port when taken or port <= 0), topics created on first use, and
// the bridge's ingress, cancel and dead-letter topics and devKafkaDemo created at once (the
// bridge never creates its ingress topic). Nothing it holds survives it. Close stops it.
func startDevKafka(port int, cfg config.Config) (*kfake.Cluster, error) {
	if port <= 0 {
		port = 0
	} else if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
		port = 0
	} else {
		ln.Close()
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(1),
		kfake.GroupMinSessionTimeout(devKafkaMinSession),
		kfake.SeedTopics(1, cfg.Kafka.Topic, cfg.CancelSubject, cfg.DLQSubject, devKafkaDemo),
	}
	if port > 0 {
		opts = append(opts, kfake.Ports(port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka stand-in: %w", err)
	}
	return c, nil
}

// devKafkaMinSession is the smallest group session timeout the stand-in accepts (kfake's
// own minimum, 6 s, would make each restart of the dev bridge wait that long to rejoin).
const devKafkaMinSession = 500 * time.Millisecond

// printDevKafkaBanner is the banner's Kafka part: where the stand-in listens, that it is
// not Kafka and not durable, and one round trip with kcat.
func printDevKafkaBanner(w io.Writer, cfg config.Config) {
	b := cfg.Kafka.Brokers[0]
	fmt.Fprintf(w, `  Kafka     %s   ingress %s, cancel %s, dead letters %s
            a Kafka-protocol STAND-IN (franz-go's kfake, one in-memory broker), not Apache
            Kafka: NOT DURABLE, topics are created on first use.
Try Kafka with kcat (a target without "kafka:" goes to NATS):
  echo hi | kcat -b %s -P -t %s -H x-delay=5s -H x-target=kafka:demo.hello
  kcat -b %s -C -t demo.hello -u -f '%%s  %%h\n'        (prints it about 5 s later)
  echo hi | kcat -b %s -P -t %s -H x-delay=5s -H x-target=nats:demo.hello   (printed here)

`, b, cfg.Kafka.Topic, cfg.CancelSubject, cfg.DLQSubject, b, cfg.Kafka.Topic, b, b, cfg.Kafka.Topic)
}
