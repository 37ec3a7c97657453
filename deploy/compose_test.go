package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/delaybridge/delaybridge/config"
)

// loadCompose loads a compose file with compose-go as `docker compose` does, validated
// against the Compose Specification schema (unknown keys and wrong types are errors),
// offline, with no interpolation and an empty environment: the file must mean what it
// says, whatever the caller's shell holds.
func loadCompose(ctx context.Context, dir string, b []byte) (*types.Project, error) {
	if bytes.Contains(b, []byte("$")) {
		return nil, errors.New("the file uses $ (interpolation): keep it literal")
	}
	return loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml"), Content: b}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("delaybridge", true)
		o.SkipInterpolation = true
		o.SkipInclude = true
	})
}

// checkCompose checks the loaded stack; it returns every problem at once.
func checkCompose(p *types.Project, dir string) error {
	var ps []error
	add := func(format string, args ...any) { ps = append(ps, fmt.Errorf(format, args...)) }

	for _, name := range []string{"redis", "nats", "kafka", "bridge"} {
		if _, ok := p.Services[name]; !ok {
			add("no service %q", name)
		}
	}
	for name, s := range p.Services {
		var names []string
		for k := range s.Environment {
			names = append(names, k)
		}
		ps = append(ps, checkBridgeNames("service "+name+" environment", names)...)
		oneShot := s.Restart == "no"
		if !oneShot && (s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0) {
			add("service %s: no healthcheck", name)
		}
	}

	// Redis: AOF on, fsync everysec or always.
	if redis, ok := p.Services["redis"]; ok {
		if v := flagValue(redis.Command, "--appendonly"); v != "yes" {
			add("redis: --appendonly is %q, want yes (AOF: parked messages survive a restart)", v)
		}
		if v := flagValue(redis.Command, "--appendfsync"); v != "everysec" && v != "always" {
			add("redis: --appendfsync is %q, want everysec or always", v)
		}
	}
	// NATS: JetStream on.
	if nats, ok := p.Services["nats"]; ok && !slices.Contains(nats.Command, "-js") && !slices.Contains(nats.Command, "--jetstream") {
		add("nats: JetStream is off (want -js in the command)")
	}
	// Kafka: one node in KRaft mode (broker and controller, no ZooKeeper).
	if kafka, ok := p.Services["kafka"]; ok {
		if !strings.HasPrefix(kafka.Image, "apache/kafka:") {
			add("kafka: image %q, want apache/kafka", kafka.Image)
		}
		roles := kafka.Environment["KAFKA_PROCESS_ROLES"]
		if roles == nil || *roles != "broker,controller" {
			add("kafka: KAFKA_PROCESS_ROLES must be broker,controller (single-node KRaft)")
		}
	}

	bridge, ok := p.Services["bridge"]
	if !ok {
		return errors.Join(ps...)
	}
	if bridge.Build == nil {
		add("bridge: not built from the Dockerfile")
	} else if _, err := os.Stat(dockerfilePath(dir, bridge.Build)); err != nil {
		add("bridge: build: %w", err)
	}
	for _, dep := range []string{"redis", "nats", "kafka"} {
		if d, ok := bridge.DependsOn[dep]; !ok || d.Condition != types.ServiceConditionHealthy {
			add("bridge: depends_on %s must have condition service_healthy", dep)
		}
	}
	env := map[string]string{}
	for k, v := range bridge.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	cfg, err := config.Load(env)
	if err == nil {
		err = cfg.ValidateForRun()
	}
	if err != nil {
		add("bridge: would not start with this environment:\n%w", err)
		return errors.Join(ps...)
	}
	if len(cfg.Brokers()) != 2 || cfg.NATS.Stream == "" {
		add("bridge: want NATS (through a JetStream stream) and Kafka configured, got %v stream %q", cfg.Brokers(), cfg.NATS.Stream)
	}
	if g := bridge.StopGracePeriod; g == nil || time.Duration(*g) <= cfg.ShutdownTimeout {
		add("bridge: stop_grace_period must exceed BRIDGE_SHUTDOWN_TIMEOUT (%v)", cfg.ShutdownTimeout)
	}
	return errors.Join(ps...)
}

// dockerfilePath returns the Dockerfile a build section names (compose-go makes the
// context absolute; the Dockerfile is relative to the context).
func dockerfilePath(dir string, b *types.BuildConfig) string {
	ctxDir := b.Context
	if !filepath.IsAbs(ctxDir) {
		ctxDir = filepath.Join(dir, ctxDir)
	}
	if filepath.IsAbs(b.Dockerfile) {
		return b.Dockerfile
	}
	return filepath.Join(ctxDir, b.Dockerfile)
}

// flagValue returns the argument after flag in args ("" when absent).
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func loadAndCheckCompose(t *testing.T, b []byte) error {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	p, err := loadCompose(t.Context(), dir, b)
	if err != nil {
		return err
	}
	return checkCompose(p, dir)
}

func TestComposeFile(t *testing.T) {
	if err := loadAndCheckCompose(t, readFile(t, "docker-compose.yml")); err != nil {
		t.Fatal(err)
	}
}

func TestComposeFileMutations(t *testing.T) {
	b := readFile(t, "docker-compose.yml")
	for _, mu := range []mutation{
		{"unknown variable", "BRIDGE_LOG_FORMAT: text", "BRIDGE_LOG_FORMT: text", "BRIDGE_LOG_FORMT is not a variable"},
		{"AOF off", `"--appendonly", "yes"`, `"--appendonly", "no"`, "--appendonly"},
		{"fsync no", `"--appendfsync", "everysec"`, `"--appendfsync", "no"`, "--appendfsync"},
		{"unknown key (schema)", "stop_grace_period: 40s", "stop_grace_periods: 40s", "services.bridge.stop_grace_periods"},
		{"wrong type (schema)", "retries: 6", "retries: six", "retries"},
		{"no JetStream", `command: ["-js", `, `command: [`, "JetStream is off"},
		{"Kafka with ZooKeeper roles", "KAFKA_PROCESS_ROLES: broker,controller", "KAFKA_PROCESS_ROLES: broker", "KRaft"},
		{"no healthcheck", "test: [\"CMD\", \"/usr/local/bin/bridge\", \"healthcheck\"]", "disable: true", "bridge: no healthcheck"},
		{"interpolation", "BRIDGE_NATS_STREAM: DELAY", "BRIDGE_NATS_STREAM: ${STREAM}", "interpolation"},
		{"bad value", "BRIDGE_SHUTDOWN_TIMEOUT: 25s", "BRIDGE_SHUTDOWN_TIMEOUT: soon", "would not start"},
		{"grace below drain", "stop_grace_period: 40s", "stop_grace_period: 20s", "stop_grace_period"},
		{"missing Dockerfile", "dockerfile: Dockerfile", "dockerfile: Dockerfile.missing", "build:"},
		{"start before Redis is healthy", "redis: {condition: service_healthy}", "redis: {condition: service_started}", "depends_on redis"},
	} {
		t.Run(mu.name, func(t *testing.T) {
			err := loadAndCheckCompose(t, applyMutation(t, b, mu))
			if err == nil {
				t.Fatalf("mutation %q passed the checks", mu.name)
			}
			if !strings.Contains(err.Error(), mu.want) {
				t.Fatalf("mutation %q failed for another reason:\n%v\nwant an error containing %q", mu.name, err, mu.want)
			}
		})
	}
}
