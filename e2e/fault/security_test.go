//go:build fault

package fault

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delaybridge/internal/e2etest"
)

// secACLRedis starts a redis-server whose only users are docs/operating.md's delaybridge user
// (password pass, keys of prefix) and an admin for the test; the default user is off.
// It returns the server and the admin client.
func secACLRedis(t *testing.T, prefix, pass string) (*secRedis, *redis.Client) {
	t.Helper()
	line := secACLLine(t, prefix, pass)
	want := slices.Clone(bridgeRedisCommands)
	slices.Sort(want)
	if got := secACLCommands(line); !slices.Equal(got, want) {
		t.Fatalf("docs/operating.md ACL allows %v, the bridge sends %v: update both together", got, want)
	}
	acl := secFile(t, "users.acl", "user default off\n"+line+"\nuser admin on >admin-pw ~* &* +@all\n")
	admin := func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, Username: "admin", Password: "admin-pw", DialTimeout: time.Second}
	}
	r := secStartRedis(t, false, admin, "--aclfile", acl)
	c := redis.NewClient(admin(r.addr()))
	t.Cleanup(func() { c.Close() })
	return r, c
}

// secAPI sends one message API request and returns the status and body.
func secAPI(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRedisACLUser is row H3: the bridge runs as docs/operating.md's ACL user (default user off,
// only the listed commands, only its key pattern and wake channel). Every path runs: park,
// deliver, cancel, get, stats. Redis logs no refused command (ACL LOG stays empty), the
// user cannot run anything else nor touch other keys (scripts included), and a wrong
// password stops the start with a clear error that does not show the password.
func TestRedisACLUser(t *testing.T) {
	s := newStack(t)
	prefix := s.env["BRIDGE_KEY_PREFIX"]
	const pass = "acl-Pa55-7f3c91"
	r, admin := secACLRedis(t, prefix, pass)
	env := s.envWith(
		"BRIDGE_REDIS_URL", "redis://"+r.addr()+"/0",
		"BRIDGE_REDIS_USERNAME", "delaybridge",
		"BRIDGE_REDIS_PASSWORD_FILE", secFile(t, "redis-password", pass+"\n"))
	b := e2etest.StartReady(t, bridgeBin, env)

	c := newChecker(t, s)
	seqs := c.send("acl", 200, uniform(500*time.Millisecond))
	// The API path: park with an id, read it back, cancel it (cancel.lua), stats.
	api := "http://" + b.APIAddr + "/v1/messages"
	if code, body := secAPI(t, "POST", api, "", `{"target":"out.other","delay":"1h","id":"acl-api","payload":"x"}`); code != 201 {
		t.Fatalf("POST: %d %s", code, body)
	}
	if code, body := secAPI(t, "GET", api+"/acl-api", "", ""); code != 200 {
		t.Fatalf("GET: %d %s", code, body)
	}
	if code, body := secAPI(t, "DELETE", api+"/acl-api", "", ""); code != 204 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	// The audit log and a resumable bulk operation (audit.lua, auditlist.lua, bulk.lua's
	// progress, bulkforget.lua): a shift, the log read in pages, a resume of the done one.
	bulkURL := "http://" + b.APIAddr + "/v1/bulk/"
	if code, body := secAPI(t, "POST", bulkURL+"reschedule", "", `{"target":"out.none","shift":"+1h"}`); code != 200 {
		t.Fatalf("bulk: %d %s", code, body)
	} else if code, body := secAPI(t, "POST", bulkURL+"resume", "", `{"op_id":"`+secOpID(t, body)+`"}`); code != 200 {
		t.Fatalf("resume: %d %s", code, body)
	}
	if code, body := secAPI(t, "GET", "http://"+b.APIAddr+"/v1/audit?limit=1", "", ""); code != 200 {
		t.Fatalf("audit: %d %s", code, body)
	} else if code, body := secAPI(t, "GET", "http://"+b.APIAddr+"/v1/audit?limit=1&cursor="+secNextCursor(t, body), "", ""); code != 200 {
		t.Fatalf("audit page 2: %d %s", code, body)
	}
	rep := c.await(seqs, 20*time.Second)
	requireSafe(t, rep)
	t.Logf("stats as the ACL user: %s", parked(t, b))
	// A scrape reads the store's gauges (metrics path: TIME, ZCARD, ZRANGE, ZCOUNT).
	if code, body := e2etest.HTTPGet("http://" + b.HTTPAddr + "/metrics"); code != 200 || !strings.Contains(body, "\ndelaybridge_store_scrape_error 0\n") {
		t.Fatalf("/metrics as the ACL user: %d, store scrape error not 0", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The fleet's counts (stats.lua, every 5 s) and their reading (GET /v1/overview?scope=fleet).
	secStatsKeys(t, admin, prefix)
	if code, body := secAPI(t, "GET", "http://"+b.APIAddr+"/v1/overview?scope=fleet", "", ""); code != 200 {
		t.Fatalf("fleet overview as the ACL user: %d %s", code, body)
	}
	if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
		t.Fatalf("Redis refused commands of the bridge (ACL LOG %v, %v): the ACL or bridgeRedisCommands is out of date", log, err)
	}

	user := redis.NewClient(&redis.Options{Addr: r.addr(), Username: "delaybridge", Password: pass})
	defer user.Close()
	for _, cmd := range [][]any{
		{"FLUSHALL"}, {"KEYS", "*"}, {"CONFIG", "GET", "*"}, {"DEL", prefix + ":shards"},
		{"SET", "other:key", "x"}, {"GET", "other:key"}, {"HSET", "other:h", "f", "v"},
		{"EVAL", "return redis.call('FLUSHALL')", "0"},
		{"EVAL", "return redis.call('HSET', 'other:h', 'f', 'v')", "0"},
		{"SUBSCRIBE", "other:channel"},
	} {
		err := user.Do(ctx, cmd...).Err()
		// Redis 7.0 words a refusal inside a script as "ERR The user executing the script can't".
		if err == nil || !strings.Contains(err.Error(), "NOPERM") && !strings.Contains(err.Error(), "user executing the script can't") {
			t.Errorf("%v as the bridge's user: %v, want NOPERM", cmd, err)
		}
	}

	// A wrong password: a clear start error, and the password nowhere.
	const wrong = "wrong-Pa55-c0ffee"
	bad := e2etest.Start(t, bridgeBin, s.envWith(
		"BRIDGE_REDIS_URL", "redis://"+r.addr()+"/0",
		"BRIDGE_REDIS_USERNAME", "delaybridge", "BRIDGE_REDIS_PASSWORD", wrong))
	if err := bad.Wait(t, 15*time.Second); err == nil {
		t.Fatal("bridge with a wrong Redis password exited 0")
	}
	out := bad.Out.String()
	if !strings.Contains(out, "WRONGPASS") {
		t.Errorf("start error does not say WRONGPASS:\n%s", out)
	}
	secNoSecrets(t, map[string]string{"bridge output (wrong password)": out, "bridge output": b.Out.String()}, wrong, pass)
	t.Logf("H3: %s; ACL LOG empty; %d forbidden commands refused with NOPERM; wrong password: exit with WRONGPASS", rep, 10)
}

// secTool runs the bridge binary as a command-line tool with env and returns its
// combined output.
func secTool(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bridgeBin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSecretsNeverInOutput is rows H7 and H8: with secrets in files and in the
// environment, at debug level, through a working run and through failing starts, no
// secret appears in the logs, in errors, in /metrics, /readyz, /healthz, in API answers
// or in the tools' output (usage text included). The API refuses requests without the
// token, and /debug/pprof/ is off by default.
func TestSecretsNeverInOutput(t *testing.T) {
	s := newStack(t)
	prefix := s.env["BRIDGE_KEY_PREFIX"]
	const (
		redisPass = "redis-S3cret-91aa"
		token     = "api-T0ken-5b7e"
		urlPass   = "url-S3cret-e1e1"
	)
	secrets := []string{redisPass, token, urlPass}
	r, _ := secACLRedis(t, prefix, redisPass)
	tokenFile := secFile(t, "token", token+"\n")
	env := s.envWith(
		"BRIDGE_LOG_LEVEL", "debug",
		"BRIDGE_REDIS_URL", "redis://"+r.addr()+"/0",
		"BRIDGE_REDIS_USERNAME", "delaybridge",
		"BRIDGE_REDIS_PASSWORD_FILE", secFile(t, "redis-password", redisPass),
		"BRIDGE_API_TOKEN_FILE", tokenFile)
	b := e2etest.StartReady(t, bridgeBin, env)
	c := newChecker(t, s)
	seqs := c.send("secret", 50, uniform(300*time.Millisecond))
	requireSafe(t, c.await(seqs, 20*time.Second))

	texts := map[string]string{}
	ops := "http://" + b.HTTPAddr
	for _, p := range []string{"/metrics", "/readyz", "/healthz"} {
		code, body := e2etest.HTTPGet(ops + p)
		if code != 200 {
			t.Errorf("GET %s: %d", p, code)
		}
		texts[p] = body
	}
	if code, _ := e2etest.HTTPGet(ops + "/debug/pprof/"); code == 200 {
		t.Error("/debug/pprof/ served without BRIDGE_PPROF=true")
	}
	api := "http://" + b.APIAddr + "/v1/stats"
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong-" + token[:4], 401}, {token, 200}} {
		code, body := secAPI(t, "GET", api, tc.token, "")
		if code != tc.want {
			t.Errorf("GET /v1/stats with token %q: %d, want %d", tc.token, code, tc.want)
		}
		texts["API answer "+itoa(tc.want)] = body
	}

	toolEnv := map[string]string{"BRIDGE_API_ADDR": b.APIAddr, "BRIDGE_API_TOKEN_FILE": tokenFile}
	out, err := secTool(t, toolEnv, "stats")
	if err != nil {
		t.Errorf("bridge stats with BRIDGE_API_TOKEN_FILE: %v\n%s", err, out)
	}
	texts["bridge stats"] = out
	out, _ = secTool(t, map[string]string{"BRIDGE_API_ADDR": b.APIAddr, "BRIDGE_API_TOKEN": token}, "stats", "--no-such-flag")
	texts["bridge stats usage"] = out
	out, _ = secTool(t, map[string]string{"BRIDGE_API_ADDR": b.APIAddr, "BRIDGE_API_TOKEN": "bad-" + token}, "stats")
	texts["bridge stats, refused"] = out

	// Failing starts: wrong password, both forms of a secret, a bad URL holding one.
	for name, extra := range map[string][]string{
		"wrong password": {"BRIDGE_REDIS_PASSWORD_FILE", "", "BRIDGE_REDIS_PASSWORD", "bad-" + redisPass},
		"both forms":     {"BRIDGE_REDIS_PASSWORD", redisPass},
		"bad url":        {"BRIDGE_REDIS_URL", "redis://u:" + urlPass + "@127.0.0.1:1/notadb"},
		"nats url creds": {"BRIDGE_NATS_URL", "nats://u:" + urlPass + "@127.0.0.1:1", "BRIDGE_NATS_STREAM", ""},
	} {
		kv := append([]string{"BRIDGE_LOG_LEVEL", "debug"}, extra...)
		fb := e2etest.Start(t, bridgeBin, secEnv(env, kv...))
		if err := fb.Wait(t, 20*time.Second); err == nil {
			t.Errorf("%s: exit 0", name)
		}
		texts["failed start: "+name] = fb.Out.String()
	}

	if err, _ := b.Stop(t, 15*time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	texts["bridge log"] = b.Out.String()
	secNoSecrets(t, texts, append(secrets, "bad-"+redisPass)...)
	n := 0
	for _, v := range texts {
		n += len(v)
	}
	t.Logf("H7/H8: %d outputs (%d bytes) searched for %d secrets: none found; API 401 without token; pprof off", len(texts), n, len(secrets)+1)
}

// secEnv is a copy of env with kv set (an empty value removes the key).
func secEnv(env map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

// secOpID is the op_id of a bulk answer.
func secOpID(t *testing.T, body string) string {
	t.Helper()
	var v struct {
		OpID string `json:"op_id"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.OpID == "" {
		t.Fatalf("no op_id in %s: %v", body, err)
	}
	return v.OpID
}

// secNextCursor is the next_cursor of an answer, query-escaped.
func secNextCursor(t *testing.T, body string) string {
	t.Helper()
	var v struct {
		NextCursor *string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.NextCursor == nil {
		t.Fatalf("no next_cursor in %s: %v", body, err)
	}
	return url.QueryEscape(*v.NextCursor)
}
