package nats_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	wmnats "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/testcerts"
	"github.com/delaybridge/delaybridge/internal/testnats"
)

// TestSecurityCreds is row H5 for JWT credentials: a server in operator mode accepts
// the bridge's .creds file (user JWT with publish permission on out.> only) over mutual
// TLS; the permissions hold; a user signed by an unknown account is refused, without its
// seed in the error.
func TestSecurityCreds(t *testing.T) {
	certs := testcerts.Generate(t)
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	if oc, err = jwt.DecodeOperatorClaims(ojwt); err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	ns := testnats.Start(t, func(o *server.Options) {
		o.JetStream = false
		o.TrustedOperators = []*jwt.OperatorClaims{oc}
		o.AccountResolver = resolver
		o.TLSConfig = certs.ServerTLS()
		o.TLS, o.TLSVerify = true, true
	})
	creds := func(signer nkeys.KeyPair) (string, string) {
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		uc := jwt.NewUserClaims(upub)
		uc.Pub.Allow.Add("out.>")
		uc.Sub.Allow.Add("_INBOX.>")
		ujwt, err := uc.Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := ukp.Seed()
		b, err := jwt.FormatUserConfig(ujwt, seed)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "bridge.creds")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p, string(seed)
	}
	url := strings.Replace(ns.URL(), "nats://", "tls://", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	goodFile, _ := creds(akp)
	opts, err := wmnats.Security{CredsFile: goodFile, TLS: certs.ClientTLS()}.Options()
	if err != nil {
		t.Fatal(err)
	}
	violations := make(chan error, 4)
	nc, err := wmnats.Connect(ctx, url, "creds-test", nil, append(opts,
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) { violations <- err }))...)
	if err != nil {
		t.Fatalf("connect with creds: %v", err)
	}
	defer nc.Close()
	if err := nc.Publish("out.x", nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("$JS.API.STREAM.DELETE.X", nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !strings.Contains(err.Error(), "$JS.API.STREAM.DELETE.X") {
			t.Errorf("violation %v", err)
		}
	case <-ctx.Done():
		t.Error("publish outside the user's permissions was not refused")
	}

	rogue, _ := nkeys.CreateAccount()
	badFile, badSeed := creds(rogue)
	opts, err = wmnats.Security{CredsFile: badFile, TLS: certs.ClientTLS()}.Options()
	if err != nil {
		t.Fatal(err)
	}
	if bad, err := wmnats.Connect(ctx, url, "rogue", nil, opts...); err == nil {
		bad.Close()
		t.Fatal("a user of an unknown account connected")
	} else if strings.Contains(err.Error(), badSeed) {
		t.Fatalf("error shows the seed: %v", err)
	}
	if _, err := (wmnats.Security{NKeyFile: filepath.Join(t.TempDir(), "none")}).Options(); err == nil {
		t.Error("missing nkey file: no error")
	}
}
