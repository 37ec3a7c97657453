//go:build fault

package fault

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// secACLLine is the Redis ACL line of the bridge's user as docs/operating.md ("Security") documents it, for the
// key prefix "delay" and the password CHANGE-ME. The tests read it from that page, so
// that the documented line is the tested one.
func secACLLine(t *testing.T, prefix, password string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "user delaybridge ") {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatal("docs/operating.md has no `user delaybridge ...` ACL line")
	}
	line = strings.ReplaceAll(line, ">CHANGE-ME", ">"+password)
	line = strings.ReplaceAll(line, "~delay:", "~"+prefix+":")
	line = strings.ReplaceAll(line, "~{delay:", "~{"+prefix+":")
	line = strings.ReplaceAll(line, "&delay:", "&"+prefix+":")
	return line
}

// bridgeRedisCommands is every Redis command the bridge sends, from Go or from its Lua
// scripts: exactly the commands the documented ACL allows. A new command in the code
// must be added here and to the ACL line of docs/operating.md (TestRedisACLUser fails until both
// agree).
var bridgeRedisCommands = []string{
	"eval", "evalsha", "exec", "exists", "get", "hdel", "hexists", "hget", "hgetall", "hincrby", "hkeys", "hmget", "hscan", "hset", "incr",
	"incrby", "info", "multi", "pexpire", "pexpireat", "ping", "pttl", "publish", "rename", "sadd", "script|load", "set", "smismember", "subscribe",
	"time", "unlink", "unsubscribe", "zadd", "zcard",
	"zcount", "zmscore", "zrange", "zrangebylex", "zrangebyscore", "zremrangebyscore", "zrem", "zrevrange", "zrevrangebylex", "zrevrank", "zscore", "wait",
}

// secACLCommands returns the +commands of an ACL line, sorted.
func secACLCommands(line string) []string {
	var out []string
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "+") && !strings.HasPrefix(f, "+@") {
			out = append(out, strings.TrimPrefix(f, "+"))
		}
	}
	sort.Strings(out)
	return out
}

// secKeyPatterns are the Redis keys the store may create, for prefix p and n shards:
// {p:i}:z, {p:i}:m, {p:i}:seq, {p:i}:epoch, {p:i}:tn and {p:i}:to (tombstones), {p:i}:r (retry set), {p:i}:n (parked count
// per target), {p:i}:c and {p:i}:cx (remembered cancels, their expiry index), p:shards, p:cursor (the key that seals API cursors), and the fleet's
// {p:fleet}:members, :version, :pending, :tokens and :tails (relays with live-event streams). Nothing a user sends may add to them.
func secKeyPatterns(p string) []*regexp.Regexp {
	q := regexp.QuoteMeta(p)
	return []*regexp.Regexp{
		regexp.MustCompile(`^\{` + q + `:(0|[1-9][0-9]*)\}:(z|m|seq|epoch|tn|to|r|n|c|cx|b|bx|qt|q|nm|k|ki)$`),
		regexp.MustCompile(`^\{` + q + `:quota\}$`), // BRIDGE_TARGET_QUOTA's counts (one Redis node)
		regexp.MustCompile(`^\{` + q + `:pause\}$`), // the paused target globs
		regexp.MustCompile(`^` + q + `:(shards|cursor)$`),
		regexp.MustCompile(`^\{` + q + `:fleet\}:(members|version|pending|tokens|tails)$`),
		regexp.MustCompile(`^\{` + q + `:fleet\}:stats:1[mh]:[0-9]+$`), // the fleet's counts by minute and hour
		regexp.MustCompile(`^\{` + q + `:audit\}:(z|e|s)$`),
	}
}

// secStatsKeys waits (up to 15 s: the replicas add their counts every 5 s) until the fleet's
// counts have a minute and an hour bucket ({P:fleet}:stats:1m:<s>, :1h:<s>) and returns
// every such key.
func secStatsKeys(t *testing.T, admin *redis.Client, prefix string) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		keys, err := admin.Keys(t.Context(), "{"+prefix+":fleet}:stats:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		minute := slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, ":stats:1m:") })
		hour := slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, ":stats:1h:") })
		if minute && hour {
			return keys
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fleet count buckets after 15 s: %q", keys)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// secRedis is a redis-server started with arbitrary arguments (ACL file, TLS-only), with
// its readiness checked through client options that can authenticate and speak TLS.
type secRedis struct {
	port int
	dir  string
}

func (r *secRedis) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// secStartRedis spawns redis-server on a free port (passed as "--port" unless tlsPort,
// then as "--tls-port" with "--port 0"), waits until opts can PING it, and kills it in
// cleanup.
func secStartRedis(t *testing.T, tlsPort bool, opts func(addr string) *redis.Options, args ...string) *secRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &secRedis{port: ln.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	ln.Close()
	portArgs := []string{"--port", strconv.Itoa(r.port)}
	if tlsPort {
		portArgs = []string{"--port", "0", "--tls-port", strconv.Itoa(r.port)}
	}
	all := append([]string{"--bind", "127.0.0.1", "--dir", r.dir, "--save", "", "--appendonly", "no"}, portArgs...)
	cmd := exec.Command("redis-server", append(all, args...)...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server not found or not startable (install redis-server): %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-done })
	c := redis.NewClient(opts(r.addr()))
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r
		}
		select {
		case <-done:
			t.Fatalf("redis-server %v exited: %s", args, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server not answering: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// secFile writes content to a new file in dir and returns its path.
func secFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// secTLSOptions are go-redis options for a TLS server.
func secTLSOptions(conf *tls.Config) func(string) *redis.Options {
	return func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, TLSConfig: conf, DialTimeout: time.Second, MaxRetries: -1}
	}
}

// secKeys lists every key of the server (SCAN, the test's own admin client).
func secKeys(t *testing.T, c *redis.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

// secNoSecrets fails when any secret appears in any of the named texts.
func secNoSecrets(t *testing.T, texts map[string]string, secrets ...string) {
	t.Helper()
	for name, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s contains the secret %q", name, s)
			}
		}
	}
}
