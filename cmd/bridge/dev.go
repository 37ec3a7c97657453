package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delaybridge/delaybridge/bridge"
	"github.com/delaybridge/delaybridge/config"
	"github.com/delaybridge/delaybridge/contract"
)

// devStream is the JetStream stream `bridge dev` creates for its dead letters. It does
// not capture the ingress and cancel subjects: a stream answers a core request with its
// PubAck, so `nats request delay.in ...` would never see the bridge's reply. Dev consumes
// them with core queue subscriptions instead.
const devStream = "DELAYBRIDGE"

// devHTTPAddr is the dev bridge's BRIDGE_HTTP_ADDR unless the environment sets one:
// loopback, as its message API and its NATS server, since a dev bridge is not for other
// machines (`bridge run` listens on :8080, for the probes of a pod).
const devHTTPAddr = "127.0.0.1:8080"

// runDev is `bridge dev`: an embedded nats-server with JetStream and an in-memory
// Redis-compatible store, the bridge wired to both, and a printer of everything that
// arrives on demo.>. Nothing is durable.
func runDev(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsPort := fs.Int("nats-port", 4223, "port of the embedded NATS server (a free one if taken or <= 0)")
	withKafka := fs.Bool("kafka", false, "also run a Kafka-protocol stand-in (franz-go's kfake, in memory, not durable) and consume its delay.in")
	kafkaPort := fs.Int("kafka-port", devKafkaPort, "port of the Kafka stand-in with --kafka (a free one if taken or <= 0)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge dev [--nats-port N] [--kafka [--kafka-port N]]")
		fs.PrintDefaults()
	}
	pos, err := parseFlags(fs, args)
	if err == nil {
		err = wantArgs(fs, pos, 0)
	}
	if err != nil {
		return err
	}

	cfg, err := devConfig(environ)
	if err != nil {
		return err
	}
	logger := bridge.NewLogger(cfg, stderr)

	storeDir, err := os.MkdirTemp("", "delaybridge-dev-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(storeDir)
	ns, err := startDevNATS(*natsPort, storeDir)
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()

	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("in-memory redis: %w", err)
	}
	defer mr.Close()

	cfg.NATS.URL = ns.ClientURL()
	cfg.NATS.Stream = "" // core subscriptions: a core request gets the bridge's reply
	cfg.Redis = config.Redis{URL: "redis://" + mr.Addr() + "/0"}
	if *withKafka {
		kc, err := startDevKafka(*kafkaPort, cfg)
		if err != nil {
			return err
		}
		defer kc.Close()
		cfg.Kafka.Brokers = kc.ListenAddrs()
	}
	stop, err := watchDemo(ctx, cfg, stdout)
	if err != nil {
		return err
	}
	defer stop()

	ops, api, err := bridge.OpenListeners(cfg)
	if err != nil {
		return err
	}
	b, err := bridge.New(cfg, bridge.WithLogger(logger), bridge.WithVersion(version), bridge.WithListeners(ops, api),
		bridge.WithReady(func() {
			printDevBanner(stdout, cfg, ops, api)
			if len(cfg.Kafka.Brokers) > 0 {
				printDevKafkaBanner(stdout, cfg)
			}
		}))
	if err != nil {
		return err
	}
	return b.Run(ctx)
}

// devConfig is the configuration from the environment with the dev bridge's own
// defaults: text logs and the operations endpoint on loopback (devHTTPAddr), unless the
// environment sets them. Its NATS and Redis URLs are placeholders until runDev starts them.
func devConfig(environ []string) (config.Config, error) {
	env := config.EnvMap(environ)
	env["BRIDGE_NATS_URL"] = "nats://placeholder:4222" // replaced by runDev; makes Load accept NATS
	cfg, err := config.Load(env)
	if err != nil {
		return cfg, fmt.Errorf("configuration:\n%w", err)
	}
	if _, set := env["BRIDGE_LOG_FORMAT"]; !set {
		cfg.LogFormat = "text"
	}
	if _, set := env["BRIDGE_HTTP_ADDR"]; !set {
		cfg.HTTPAddr = devHTTPAddr
	}
	return cfg, nil
}

// watchDemo connects to the embedded NATS, creates the dead-letter stream and prints
// every message that arrives on demo.> to w until stop is called.
func watchDemo(ctx context.Context, cfg config.Config, w io.Writer) (stop func(), err error) {
	nc, err := natsgo.Connect(cfg.NATS.URL, natsgo.Name("delaybridge-dev"))
	if err != nil {
		return nil, fmt.Errorf("connect embedded nats: %w", err)
	}
	if err := createDevStream(ctx, nc, cfg); err != nil {
		nc.Close()
		return nil, err
	}
	printer := &arrivalPrinter{w: w}
	demo, err := nc.Subscribe("demo.>", printer.print)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("subscribe demo.>: %w", err)
	}
	return func() { _ = demo.Unsubscribe(); nc.Close() }, nil
}

func startDevNATS(port int, storeDir string) (*server.Server, error) {
	opts := &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: storeDir, NoSigs: true, NoLog: true}
	if port <= 0 {
		opts.Port = server.RANDOM_PORT
	} else if ln, err := net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(port))); err != nil {
		opts.Port = server.RANDOM_PORT
	} else {
		ln.Close()
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats did not start within 10s")
	}
	return ns, nil
}

// createDevStream creates the stream capturing the bridge's dead-letter subject, so dead
// letters can be read back (in run mode the bridge never creates streams).
func createDevStream(ctx context.Context, nc *natsgo.Conn, cfg config.Config) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     devStream,
		Subjects: []string{cfg.DLQSubject},
		Storage:  jetstream.MemoryStorage,
	})
	if err != nil {
		return fmt.Errorf("create dev stream %s: %w", devStream, err)
	}
	return nil
}

// printDevBanner says where the dev bridge listens and how to try it. A listener on every
// interface (BRIDGE_HTTP_ADDR=:8080) is shown with the address to dial on this machine
// and says so.
func printDevBanner(w io.Writer, cfg config.Config, opsLn, apiLn net.Listener) {
	api, console := "(off)", "(off)"
	if apiLn != nil {
		api = "http://" + reachable(apiLn.Addr()) + "/v1/messages" + allInterfaces(apiLn.Addr())
		console = "http://" + reachable(apiLn.Addr()) + "/ui/"
	}
	self := os.Args[0] // as the user started it: bin/bridge after make run
	fmt.Fprintf(w, `
delaybridge dev is running. NOTHING IS DURABLE: in-memory Redis, temporary JetStream
(and with --kafka an in-memory Kafka stand-in).

  NATS      %s   ingress %s, cancel %s (core NATS); stream %s keeps dead letters (%s)
  metrics   http://%s/metrics%s
  API       %s
  console   %s

Try it from another terminal:
  %s send --delay 5s --target demo.hello hi
  nats --server %s pub %s hi -H x-delay:5s -H x-target:demo.hello
  nats --server %s request %s hi -H x-delay:5s -H x-target:demo.hello   (replies {"id","due"} or {"error"})

Messages arriving on demo.> are printed here; watch any other target with a NATS client:
  nats --server %s sub 'orders.>'
Dead letters (%s, kept by stream %s), and sending them back once their cause is fixed:
  nats --server %s stream get %s --last-for %s
  BRIDGE_NATS_URL=%s BRIDGE_REDIS_URL=%s %s redrive --dry-run
  (BRIDGE_REDIS_URL: this bridge's in-memory Redis, so its audit log records the run)
Ctrl-C stops.

`, cfg.NATS.URL, cfg.NATS.Subject, cfg.CancelSubject, devStream, cfg.DLQSubject,
		reachable(opsLn.Addr()), allInterfaces(opsLn.Addr()), api, console, self, cfg.NATS.URL, cfg.NATS.Subject, cfg.NATS.URL, cfg.NATS.Subject,
		cfg.NATS.URL, cfg.DLQSubject, devStream, cfg.NATS.URL, devStream, cfg.DLQSubject, cfg.NATS.URL, cfg.Redis.URL, self)
}

// allInterfaces is the banner's note for a listener on every interface, "" otherwise.
func allInterfaces(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		return fmt.Sprintf("   (listening on every interface, port %d)", tcp.Port)
	}
	return ""
}

// reachable is a listener's address as a client on this machine dials it: an
// unspecified host (":8080" listens on [::]) becomes 127.0.0.1.
func reachable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
}

// arrivalPrinter prints messages delivered to demo.> with their lateness.
type arrivalPrinter struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *arrivalPrinter) print(m *natsgo.Msg) {
	now := time.Now()
	late := ""
	if due, err := strconv.ParseInt(m.Header.Get(contract.HeaderDue), 10, 64); err == nil {
		late = fmt.Sprintf(" (%s after due)", now.Sub(time.UnixMilli(due)).Round(time.Millisecond))
	}
	keys := make([]string, 0, len(m.Header))
	for k := range m.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var hs []string
	for _, k := range keys {
		for _, v := range m.Header[k] {
			hs = append(hs, k+"="+v)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%s  arrived on %s%s: %q  [%s]\n", now.Format("15:04:05.000"), m.Subject, late,
		m.Data, strings.Join(hs, " "))
}
