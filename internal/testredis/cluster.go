package testredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// ClusterOptions shape a test cluster.
type ClusterOptions struct {
	// Masters is the number of masters (default 3).
	Masters int
	// Replicas is the number of replicas per master (0 or more).
	Replicas int
	// Password, when set, is every node's requirepass and masterauth.
	Password string
	// Args are added to every node's command line.
	Args []string
	// MigratePause holds a slot in migration this long after [Cluster.MoveSlot] moved its
	// keys and before it assigns the slot, so that clients meet ASK redirects.
	MigratePause time.Duration
}

// Cluster is a Redis Cluster of spawned redis-server processes on loopback, each with
// its own AOF (fsync always), a cluster-node-timeout of 1 s (so a killed master is
// replaced within a few seconds) and replicas always allowed to fail over. Its methods
// are safe for concurrent use.
type Cluster struct {
	// Nodes are every node, masters first (in slot order), then the replicas of master 0,
	// of master 1, ... as started; roles change with failovers.
	Nodes        []*Server
	password     string
	migratePause time.Duration
}

// StartCluster starts a cluster and blocks until every node reports cluster_state:ok and
// every replica is in sync; the nodes are killed in t.Cleanup. The slots are split evenly
// over the masters. It is built with CLUSTER ADDSLOTSRANGE / MEET / REPLICATE directly, so
// it needs no redis-cli, and takes about a second. t.Fatal on failure; never skips.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	c := &Cluster{password: opts.Password, migratePause: opts.MigratePause}
	args := []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
		"--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "yes",
		"--repl-diskless-sync-delay", "0"}
	if opts.Password != "" {
		args = append(args, "--requirepass", opts.Password, "--masterauth", opts.Password)
	}
	args = append(args, opts.Args...)
	for range opts.Masters * (1 + opts.Replicas) {
		dir := t.TempDir()
		s := &Server{dir: dir, args: args, password: opts.Password}
		s.portArgs = func(int) []string {
			bus, err := freePort()
			if err != nil {
				bus = 0
			}
			s.busPort = bus
			return []string{"--cluster-config-file", dir + "/nodes.conf", "--cluster-port", strconv.Itoa(bus)}
		}
		c.Nodes = append(c.Nodes, start(t, s))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.form(ctx, opts.Masters, opts.Replicas); err != nil {
		t.Fatalf("testredis: form cluster: %v", err)
	}
	return c
}

// form assigns slots, joins the nodes and attaches the replicas, then waits for a healthy
// cluster.
func (c *Cluster) form(ctx context.Context, masters, replicas int) error {
	for i := range masters {
		n := c.node(c.Nodes[i])
		lo, hi := i*Slots/masters, (i+1)*Slots/masters-1
		if err := n.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("addslots on %s: %w", c.Nodes[i].Addr(), err)
		}
		if err := n.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("set-config-epoch: %w", err)
		}
		n.Close()
	}
	first := c.node(c.Nodes[0])
	defer first.Close()
	for _, s := range c.Nodes[1:] {
		if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.port, s.busPort).Err(); err != nil {
			return fmt.Errorf("meet %s: %w", s.Addr(), err)
		}
	}
	if err := poll(ctx, func(ctx context.Context) error {
		for _, s := range c.Nodes {
			n := c.node(s)
			nodes, err := n.ClusterNodes(ctx).Result()
			n.Close()
			if err != nil {
				return err
			}
			if got := strings.Count(strings.TrimSpace(nodes), "\n") + 1; got != len(c.Nodes) {
				return fmt.Errorf("%s knows %d of %d nodes", s.Addr(), got, len(c.Nodes))
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i := range masters {
		id, err := c.ID(ctx, c.Nodes[i])
		if err != nil {
			return err
		}
		for r := range replicas {
			s := c.Nodes[masters+i*replicas+r]
			n := c.node(s)
			err := n.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			n.Close()
			if err != nil {
				return fmt.Errorf("replicate %s: %w", s.Addr(), err)
			}
		}
	}
	return c.WaitHealthy(ctx)
}

// WaitHealthy blocks until every running node reports cluster_state:ok, agrees on the
// owner of every slot, and every running replica's link to its master is up.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return poll(ctx, func(ctx context.Context) error {
		var want string
		for _, s := range c.running() {
			n := c.node(s)
			info, err := n.ClusterInfo(ctx).Result()
			if err != nil {
				n.Close()
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				n.Close()
				return fmt.Errorf("%s: cluster state not ok", s.Addr())
			}
			repl, err := n.Info(ctx, "replication").Result()
			if err == nil && strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				err = fmt.Errorf("%s: replica not in sync", s.Addr())
			}
			var owners string
			if err == nil {
				owners, err = slotOwners(ctx, n)
			}
			n.Close()
			if err != nil {
				return err
			}
			if want == "" {
				want = owners
			} else if owners != want {
				return fmt.Errorf("%s: disagrees on the slot map", s.Addr())
			}
		}
		return nil
	})
}

// slotOwners is the slot map as one node sees it: "lo-hi:port" of every master.
func slotOwners(ctx context.Context, n *redis.Client) (string, error) {
	slots, err := n.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, r := range slots {
		parts = append(parts, fmt.Sprintf("%d-%d:%s", r.Start, r.End, r.Nodes[0].Addr))
	}
	slices.Sort(parts)
	return strings.Join(parts, ","), nil
}

// Addrs returns the addresses of all nodes, for BRIDGE_REDIS_CLUSTER_ADDRS.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// Client returns a cluster client over the nodes (with the password), closed in
// t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Password: c.password,
		ClusterStateReloadInterval: time.Second, MaxRedirects: 8})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// ID returns the cluster node id of s.
func (c *Cluster) ID(ctx context.Context, s *Server) (string, error) {
	n := c.node(s)
	defer n.Close()
	id, err := n.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return "", fmt.Errorf("cluster myid %s: %w", s.Addr(), err)
	}
	return id, nil
}

// Owner returns the master that serves slot, as a running node sees it.
func (c *Cluster) Owner(ctx context.Context, slot int) (*Server, error) {
	for _, s := range c.running() {
		n := c.node(s)
		slots, err := n.ClusterSlots(ctx).Result()
		n.Close()
		if err != nil {
			continue
		}
		for _, r := range slots {
			if slot >= r.Start && slot <= r.End {
				return c.byAddr(r.Nodes[0].Addr)
			}
		}
		return nil, fmt.Errorf("slot %d is not served", slot)
	}
	return nil, errors.New("no node answers")
}

// Masters returns the running masters.
func (c *Cluster) Masters(ctx context.Context) ([]*Server, error) {
	var out []*Server
	for _, s := range c.running() {
		n := c.node(s)
		role, err := n.Do(ctx, "ROLE").Slice()
		n.Close()
		if err != nil {
			return nil, fmt.Errorf("role %s: %w", s.Addr(), err)
		}
		if len(role) > 0 && role[0] == "master" {
			out = append(out, s)
		}
	}
	return out, nil
}

// MoveSlot migrates slot and its keys to the master to, as `redis-cli --cluster reshard`
// does: SETSLOT IMPORTING on the target, MIGRATING on the source, MIGRATE of the keys in
// batches, then SETSLOT NODE on both and on every other master. While it runs, clients
// see ASK redirects (and MOVED after it). It returns the number of keys moved.
func (c *Cluster) MoveSlot(ctx context.Context, slot int, to *Server) (int, error) {
	from, err := c.Owner(ctx, slot)
	if err != nil {
		return 0, err
	}
	if from == to {
		return 0, nil
	}
	fromID, err := c.ID(ctx, from)
	if err != nil {
		return 0, err
	}
	toID, err := c.ID(ctx, to)
	if err != nil {
		return 0, err
	}
	src, dst := c.node(from), c.node(to)
	defer src.Close()
	defer dst.Close()
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		return 0, fmt.Errorf("setslot importing: %w", err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		return 0, fmt.Errorf("setslot migrating: %w", err)
	}
	moved := 0
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return moved, fmt.Errorf("getkeysinslot: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.port, "", 0, 5000}
		if c.password != "" {
			args = append(args, "AUTH", c.password)
		}
		args = append(args, "KEYS")
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return moved, fmt.Errorf("migrate: %w", err)
		}
		moved += len(keys)
	}
	if c.migratePause > 0 {
		select {
		case <-ctx.Done():
			return moved, ctx.Err()
		case <-time.After(c.migratePause):
		}
	}
	// The target first, so that it answers for the slot before the source redirects.
	for _, s := range append([]*Server{to, from}, c.running()...) {
		n := c.node(s)
		role, _ := n.Do(ctx, "ROLE").Slice()
		if len(role) > 0 && role[0] == "master" {
			err = n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err()
		}
		n.Close()
		if err != nil {
			return moved, fmt.Errorf("setslot node on %s: %w", s.Addr(), err)
		}
	}
	return moved, nil
}

// WaitFailover blocks until the slots that killed served are served by another running
// master and the cluster is healthy again; it returns the new owner.
func (c *Cluster) WaitFailover(ctx context.Context, killed *Server, slot int) (*Server, error) {
	var owner *Server
	err := poll(ctx, func(ctx context.Context) error {
		o, err := c.Owner(ctx, slot)
		if err != nil {
			return err
		}
		if o == killed {
			return errors.New("slot still owned by the killed master")
		}
		owner = o
		return nil
	})
	if err != nil {
		return nil, err
	}
	return owner, c.WaitHealthy(ctx)
}

// node is a plain client of one node.
func (c *Cluster) node(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), Password: c.password, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 10 * time.Second})
}

func (c *Cluster) running() []*Server {
	var out []*Server
	for _, s := range c.Nodes {
		if s.running() {
			out = append(out, s)
		}
	}
	return out
}

func (c *Cluster) byAddr(addr string) (*Server, error) {
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown node %s", addr)
}

// poll calls f every 50 ms until it returns nil or ctx ends. Its error then names f's
// last failure that was not the deadline itself.
func poll(ctx context.Context, f func(context.Context) error) error {
	var last error
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// KeySlot returns the cluster hash slot of key: CRC16 (XMODEM) of its hash tag (the part
// between the first { and the next }, when not empty) or of the whole key, mod 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}
