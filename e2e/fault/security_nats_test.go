//go:build fault

package fault

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/delaybridge/delaybridge/internal/e2etest"
	"github.com/delaybridge/delaybridge/internal/testcerts"
	"github.com/delaybridge/delaybridge/internal/testnats"
	"github.com/delaybridge/delaybridge/internal/testredis"
)

// bridgeNATSPermissions is the least a core-NATS bridge needs, for ingress delay.in,
// cancel delay.cancel, targets out.> and dead letters delay.dlq: it may subscribe to its
// two ingress subjects and its reply inbox, and publish to the targets, the dead-letter
// subject and the JetStream stream lookup it makes before a publish.
var bridgeNATSPermissions = &server.Permissions{
	Publish:   &server.SubjectPermission{Allow: []string{"out.>", "delay.dlq", "$JS.API.STREAM.NAMES"}},
	Subscribe: &server.SubjectPermission{Allow: []string{"delay.in", "delay.cancel", "_INBOX.>"}},
}

// secNkey returns a user nkey's public key and a file holding its seed.
func secNkey(t *testing.T) (string, string, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	return pub, string(seed), secFile(t, "user.nk", string(seed)+"\n")
}

// TestNATSNkeyTLSLeastPrivilege is row H5: NATS requires mutual TLS and nkey
// authentication, and the bridge's user has only bridgeNATSPermissions. The bridge works
// end to end (core NATS); an unknown nkey or a missing client certificate stops the
// start; with the bridge's own credentials, publishing to $JS.API.STREAM.DELETE.X or a
// subject outside the targets is refused by the server; the seed never appears in the
// bridge's output.
func TestNATSNkeyTLSLeastPrivilege(t *testing.T) {
	certs := testcerts.Generate(t)
	pub, seed, seedFile := secNkey(t)
	_, otherSeed, otherSeedFile := secNkey(t)
	ns := testnats.Start(t, func(o *server.Options) {
		o.JetStream = false
		o.TLSConfig = certs.ServerTLS()
		o.TLS, o.TLSVerify = true, true
		o.Nkeys = []*server.NkeyUser{{Nkey: pub, Permissions: bridgeNATSPermissions}}
		o.Users = []*server.User{{Username: "test", Password: "test-pw"}}
	})
	url := strings.Replace(ns.URL(), "nats://", "tls://", 1)
	nc, err := nats.Connect(url, nats.UserInfo("test", "test-pw"), nats.Secure(certs.ClientTLS()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	var mu sync.Mutex
	got := map[string]int{}
	early := 0
	sub, err := nc.Subscribe("out.fault", func(m *nats.Msg) {
		due, _ := strconv.ParseInt(m.Header.Get("x-delay-due"), 10, 64)
		mu.Lock()
		defer mu.Unlock()
		if time.Now().UnixMilli() < due {
			early++
		}
		got[m.Header.Get("seq")]++
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	env := map[string]string{
		"BRIDGE_REDIS_URL":          testredis.Start(t).URL(),
		"BRIDGE_KEY_PREFIX":         testredis.Prefix(t),
		"BRIDGE_NATS_URL":           url,
		"BRIDGE_NATS_NKEY_FILE":     seedFile,
		"BRIDGE_NATS_TLS_CA_FILE":   certs.CA,
		"BRIDGE_NATS_TLS_CERT_FILE": certs.ClientCert,
		"BRIDGE_NATS_TLS_KEY_FILE":  certs.ClientKey,
		"BRIDGE_LOG_FORMAT":         "text",
		"BRIDGE_LOG_LEVEL":          "debug",
	}
	b := e2etest.StartReady(t, bridgeBin, env)
	const n = 200
	for i := range n {
		m := nats.NewMsg("delay.in")
		m.Header.Set("x-delay", strconv.Itoa(i*7919%500))
		m.Header.Set("x-target", "out.fault")
		m.Header.Set("seq", strconv.Itoa(i))
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	delivered, e := len(got), early
	mu.Unlock()
	if delivered != n || e != 0 {
		t.Fatalf("delivered %d of %d, early %d\n%s", delivered, n, e, b.Out.String())
	}
	if strings.Contains(b.Out.String(), "Permissions Violation") {
		t.Fatalf("the bridge needed more than bridgeNATSPermissions:\n%s", b.Out.String())
	}

	// A target the bridge may not publish to (allowed by BRIDGE_TARGET_ALLOW, refused by
	// the server) is dead-lettered as forbidden (row D4), never counted as delivered.
	var dlqN, deniedN atomic.Int64
	dsub, err := nc.Subscribe("delay.dlq", func(*nats.Msg) { dlqN.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer dsub.Unsubscribe()
	xsub, err := nc.Subscribe("denied.x", func(*nats.Msg) { deniedN.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer xsub.Unsubscribe()
	dm := nats.NewMsg("delay.in")
	dm.Header.Set("x-delay", "10")
	dm.Header.Set("x-target", "denied.x")
	if err := nc.PublishMsg(dm); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); dlqN.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	_, stats := e2etest.HTTPGet("http://" + b.APIAddr + "/v1/stats")
	stats = strings.TrimSpace(stats)
	if dlqN.Load() != 1 || deniedN.Load() != 0 {
		t.Fatalf("target refused by server permissions: delivered %d, dead-lettered %d (want 0 and 1), stats %s\n%s",
			deniedN.Load(), dlqN.Load(), stats, b.Out.String())
	}
	t.Logf("target refused by server permissions: dead-lettered, stats %s", stats)

	// The bridge's own credentials cannot reach the JetStream API or other subjects.
	var violations []string
	var vmu sync.Mutex
	seedOpt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := nats.Connect(url, seedOpt, nats.Secure(certs.ClientTLS()), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		vmu.Lock()
		violations = append(violations, err.Error())
		vmu.Unlock()
	}))
	if err != nil {
		t.Fatalf("the bridge's nkey: %v", err)
	}
	defer bc.Close()
	for _, subj := range []string{"$JS.API.STREAM.DELETE.ORDERS", "$SYS.REQ.SERVER.PING", "billing.x", "delay.in"} {
		if err := bc.Publish(subj, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bc.SubscribeSync("out.>"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		vmu.Lock()
		k := len(violations)
		vmu.Unlock()
		if k >= 5 || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	vmu.Lock()
	if len(violations) < 5 {
		t.Errorf("permission violations %d of 5: %v", len(violations), violations)
	}
	vmu.Unlock()

	b.Kill(t)
	for name, extra := range map[string][]string{
		"unknown nkey":          {"BRIDGE_NATS_NKEY_FILE", otherSeedFile},
		"no client certificate": {"BRIDGE_NATS_TLS_CERT_FILE", "", "BRIDGE_NATS_TLS_KEY_FILE", ""},
	} {
		fb := e2etest.Start(t, bridgeBin, secEnv(env, extra...))
		if err := fb.Wait(t, 20*time.Second); err == nil {
			t.Errorf("%s: exit 0", name)
		}
		secNoSecrets(t, map[string]string{name: fb.Out.String()}, seed, otherSeed)
	}
	secNoSecrets(t, map[string]string{"bridge output": b.Out.String()}, seed)
	t.Log(fmt.Sprintf("H5: messages %d, delivered %d, early %d; nkey + mTLS + %d publish / %d subscribe permissions; 5 violations refused; unknown nkey and no client certificate: start fails",
		n, delivered, e, len(bridgeNATSPermissions.Publish.Allow), len(bridgeNATSPermissions.Subscribe.Allow)))
}
