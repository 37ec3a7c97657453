package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name the sentinels of [StartSentinel] monitor.
const SentinelMaster = "testmaster"

// SentinelOptions shape a Sentinel deployment.
type SentinelOptions struct {
	// Password, when set, is every data node's requirepass and masterauth (the sentinels
	// themselves have none).
	Password string
	// Replicas is the number of replicas (default 2).
	Replicas int
}

// Sentinel is 1 primary + 2 replicas (SentinelOptions.Replicas) + 3 sentinels (quorum 2), all spawned redis-server
// processes on loopback: data nodes with an AOF (fsync always), sentinels with
// down-after-milliseconds 1000, so a killed primary is replaced within a few seconds. Its
// methods are safe for concurrent use.
type Sentinel struct {
	// Data are the primary (first, at start) and the replicas; roles change on failover.
	Data []*Server
	// Sentinels are the sentinel processes.
	Sentinels []*Server
	password  string
	replicas  int
}

// StartSentinel starts the deployment and blocks until every sentinel knows every replica
// and the other sentinels and the replicas are in sync; t.Fatal on failure, never skips.
func StartSentinel(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	if opts.Replicas == 0 {
		opts.Replicas = 2
	}
	d := &Sentinel{password: opts.Password, replicas: opts.Replicas}
	args := []string{"--repl-diskless-sync-delay", "0"}
	if opts.Password != "" {
		args = append(args, "--requirepass", opts.Password, "--masterauth", opts.Password)
	}
	primary := start(t, &Server{dir: t.TempDir(), args: args, password: opts.Password})
	d.Data = append(d.Data, primary)
	for range opts.Replicas {
		r := start(t, &Server{dir: t.TempDir(), args: append(args, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port)),
			password: opts.Password})
		d.Data = append(d.Data, r)
	}
	for range 3 {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 10000\n"+
			"sentinel parallel-syncs %[1]s 2\n", SentinelMaster, primary.port)
		if opts.Password != "" {
			text += fmt.Sprintf("sentinel auth-pass %s %s\n", SentinelMaster, opts.Password)
		}
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatalf("testredis: sentinel config: %v", err)
		}
		d.Sentinels = append(d.Sentinels, start(t, &Server{dir: dir, sentinelConf: conf}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.waitSettled(ctx, primary.Addr()); err != nil {
		t.Fatalf("testredis: sentinel setup: %v", err)
	}
	return d
}

// Addrs returns the sentinels' addresses, for BRIDGE_REDIS_SENTINEL_ADDRS.
func (d *Sentinel) Addrs() []string {
	out := make([]string, len(d.Sentinels))
	for i, s := range d.Sentinels {
		out[i] = s.Addr()
	}
	return out
}

// Client returns a FailoverClient for the deployment, closed in t.Cleanup.
func (d *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: d.Addrs(), Password: d.password})
	t.Cleanup(func() { c.Close() })
	return c
}

// Primary returns the data node the sentinels name as primary.
func (d *Sentinel) Primary(ctx context.Context) (*Server, error) {
	var lastErr error
	for _, s := range d.Sentinels {
		addr, err := d.sentinelPrimary(ctx, s)
		if err != nil {
			lastErr = err
			continue
		}
		return d.byAddr(addr)
	}
	return nil, fmt.Errorf("no sentinel answers: %w", lastErr)
}

// KillPrimary sends SIGKILL to the current primary and returns it.
func (d *Sentinel) KillPrimary(ctx context.Context) (*Server, error) {
	p, err := d.Primary(ctx)
	if err != nil {
		return nil, err
	}
	p.Kill()
	return p, nil
}

// Switchover asks a sentinel for a failover without agreement (SENTINEL FAILOVER): a
// graceful switch of the primary to a replica.
func (d *Sentinel) Switchover(ctx context.Context) error {
	sc := d.sentinelClient(d.Sentinels[0])
	defer sc.Close()
	if err := sc.Failover(ctx, SentinelMaster).Err(); err != nil {
		return fmt.Errorf("sentinel failover: %w", err)
	}
	return nil
}

// WaitFailover blocks until the sentinels agree on a new primary (WaitPromoted) and a
// replica follows it in sync (an old primary that still runs, after a switchover, is
// turned into a replica by the sentinels up to ~10 s later: not waited for). It returns
// the new primary.
func (d *Sentinel) WaitFailover(ctx context.Context, old *Server) (*Server, error) {
	p, err := d.WaitPromoted(ctx, old)
	if err != nil {
		return nil, err
	}
	return p, poll(ctx, func(ctx context.Context) error { return d.dataSettled(ctx, p, 1) })
}

// WaitPromoted blocks until every sentinel names the same primary other than old and
// returns it. Restart a killed primary only after this: a sentinel that has not yet
// learnt of the promotion sees the old node come back as a sane master and turns the
// promoted replica back into its replica (sentinel's +convert-to-slave), undoing the
// failover.
func (d *Sentinel) WaitPromoted(ctx context.Context, old *Server) (*Server, error) {
	var primary string
	err := poll(ctx, func(ctx context.Context) error {
		primary = ""
		for _, s := range d.Sentinels {
			addr, err := d.sentinelPrimary(ctx, s)
			if err != nil {
				return err
			}
			if addr == old.Addr() {
				return fmt.Errorf("sentinel %s still names the old primary", s.Addr())
			}
			if primary != "" && addr != primary {
				return fmt.Errorf("sentinels disagree: %s and %s", primary, addr)
			}
			primary = addr
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d.byAddr(primary)
}

// waitSettled waits until the sentinels see the primary, every replica and each other.
func (d *Sentinel) waitSettled(ctx context.Context, primary string) error {
	p, err := d.byAddr(primary)
	if err != nil {
		return err
	}
	return poll(ctx, func(ctx context.Context) error {
		for _, s := range d.Sentinels {
			sc := d.sentinelClient(s)
			m, err := sc.Master(ctx, SentinelMaster).Result()
			sc.Close()
			if err != nil {
				return err
			}
			if net.JoinHostPort(m["ip"], m["port"]) != primary || m["num-slaves"] != strconv.Itoa(d.replicas) || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sentinel %s: master %s:%s, %s replicas, %s other sentinels",
					s.Addr(), m["ip"], m["port"], m["num-slaves"], m["num-other-sentinels"])
			}
		}
		return d.dataSettled(ctx, p, d.replicas)
	})
}

// dataSettled checks that p is a master and at least replicas other running data nodes
// replicate it with their link up.
func (d *Sentinel) dataSettled(ctx context.Context, p *Server, replicas int) error {
	synced := 0
	for _, s := range d.Data {
		if !s.running() {
			continue
		}
		n := d.node(s)
		info, err := n.Info(ctx, "replication").Result()
		n.Close()
		if err != nil {
			return err
		}
		if s == p {
			if !strings.Contains(info, "role:master") {
				return fmt.Errorf("%s is not master yet", s.Addr())
			}
			continue
		}
		if strings.Contains(info, "master_port:"+strconv.Itoa(p.port)+"\r") && strings.Contains(info, "master_link_status:up") {
			synced++
		}
	}
	if synced < replicas {
		return fmt.Errorf("%d of %d replicas follow %s in sync", synced, replicas, p.Addr())
	}
	return nil
}

func (d *Sentinel) sentinelPrimary(ctx context.Context, s *Server) (string, error) {
	sc := d.sentinelClient(s)
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", s.Addr(), err)
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

func (d *Sentinel) sentinelClient(s *Server) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
}

func (d *Sentinel) node(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), Password: d.password, MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
}

func (d *Sentinel) byAddr(addr string) (*Server, error) {
	for _, s := range d.Data {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown data node %s", addr)
}
