package testnats

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

func TestRestartKeepsStreamAndURL(t *testing.T) {
	s := Start(t)
	url := s.URL()
	nc := Connect(t, url)
	CreateStream(t, nc, "KEEP", "keep.>")

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "keep.a", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}

	s.Restart(t)
	if got := s.URL(); got != url {
		t.Fatalf("URL after restart = %s, want %s", got, url)
	}

	// The old connection reconnects on its own; poll until the stream answers. Each try
	// has its own short context: the publish's may have run out while the server restarted
	// on a loaded machine (CI once spent the whole 10 s there).
	var msgs uint64
	var lastErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		tctx, tcancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := js.Stream(tctx, "KEEP")
		tcancel()
		if err != nil {
			lastErr = err
			continue
		}
		msgs = st.CachedInfo().State.Msgs
		lastErr = nil
		break
	}
	if msgs != 1 {
		t.Logf("last error: %v", lastErr)
		t.Fatalf("stream messages after restart = %d, want 1", msgs)
	}
}

func TestStartOptions(t *testing.T) {
	s := Start(t, func(o *server.Options) { o.JetStream = false })
	if s.NATS().JetStreamEnabled() {
		t.Fatal("JetStream enabled, want disabled by the option")
	}
	s.Shutdown()
	s.Shutdown() // idempotent; the cleanup calls it again
}
