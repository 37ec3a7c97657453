// Command kfake-standin is the Kafka STAND-IN of `make e2e-compose`: no Kafka image can be
// had on the machines that run it (no registry is reachable), so the local stack's `kafka`
// service runs this instead, a single in-memory broker of franz-go's kfake speaking the
// Kafka protocol on a fixed address. It is a test double for the compose run only; the
// user-facing deploy/docker-compose.yml keeps apache/kafka.
//
//	kfake-standin -addr 127.0.0.1:9092          serve until SIGTERM or SIGINT
//	kfake-standin -probe 127.0.0.1:9092         health check: exit 0 when a broker answers
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9092", "listen address (kfake always binds 127.0.0.1; the port is taken from here)")
	probe := flag.String("probe", "", "instead of serving, ping the broker at this address and exit 0 when it answers")
	partitions := flag.Int("partitions", 3, "partitions of an auto-created topic (as the compose file's KAFKA_NUM_PARTITIONS)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *probe != "" {
		err = ping(ctx, *probe)
	} else {
		err = serve(ctx, *addr, *partitions)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake-standin:", err)
		os.Exit(1)
	}
}

// serve runs one kfake broker on addr's port, topics auto-created, until ctx ends.
func serve(ctx context.Context, addr string, partitions int) error {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
	)
	if err != nil {
		return fmt.Errorf("start kfake on port %d: %w", port, err)
	}
	fmt.Printf("kfake-standin (kfake, not Apache Kafka) listening on %v\n", c.ListenAddrs())
	<-ctx.Done()
	c.Close()
	return nil
}

// ping asks the broker at addr for metadata, within 3 s.
func ping(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("ping %s: %w", addr, err)
	}
	return nil
}
