package e2e

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/delaybridge/delaybridge/httpapi"
	"github.com/delaybridge/delaybridge/httpapi/client"
)

// TestQuotaOverReplicas: BRIDGE_TARGET_QUOTA=tenant-a.*=1000 on 4 replicas (built
// binaries, one Redis), 5,000 messages for tenant-a targets sent at once as core NATS
// requests (the queue group spreads them): exactly 1,000 are parked and 4,000 answered
// and dead-lettered quota_exceeded; a target of no pattern is not limited; a cancel
// frees a place at once (the next API POST gets 201, the one after 429); the metrics show
// the use.
func TestQuotaOverReplicas(t *testing.T) {
	s := newStack(t)
	s.env["BRIDGE_TARGET_QUOTA"] = "tenant-a.*=1000"
	var bs []*bridge
	for range 4 {
		bs = append(bs, startBridge(t, maps.Clone(s.env))) // each its own ports
	}
	dlq := subscribe(t, s.nc, s.name("delay.dlq"))
	const total, limit, senders = 5000, 1000, 16
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < total; i += senders {
				hdr := nats.Header{}
				hdr.Set("x-delay", "1h")
				hdr.Set("x-target", fmt.Sprintf("tenant-a.t%d", i%10))
				hdr.Set("x-delay-id", fmt.Sprintf("q-%d", i))
				resp, err := s.nc.RequestMsg(&nats.Msg{Subject: s.name("delay.in"), Header: hdr, Data: []byte("x")}, 10*time.Second)
				switch {
				case err != nil:
					errs <- err
					return
				case strings.Contains(string(resp.Data), `"error":"quota_exceeded: `):
					over.Add(1)
				case strings.Contains(string(resp.Data), `"due":`):
					ok.Add(1)
				default:
					errs <- fmt.Errorf("reply %s", resp.Data)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ok.Load() != limit || over.Load() != total-limit {
		t.Fatalf("%d parked, %d over quota; want %d and %d", ok.Load(), over.Load(), limit, total-limit)
	}
	for n := 0; n < total-limit; n++ {
		a := receive(t, dlq, 10*time.Second)
		if e := a.msg.Header.Get("x-delay-error"); !strings.HasPrefix(e, "quota_exceeded: ") {
			t.Fatalf("dead letter %d: x-delay-error %q", n, e)
		}
	}
	c := func(b *bridge) *client.Client { return &client.Client{Base: "http://" + b.APIAddr} }
	st, err := c(bs[0]).Stats(t.Context())
	if err != nil || st.Parked != limit {
		t.Fatalf("stats: %+v %v, want %d parked", st, err, limit)
	}
	// A target of no pattern is not limited.
	if _, err := c(bs[1]).Send(t.Context(), httpapi.PostRequest{Target: "tenant-b.x", Delay: []byte(`"1h"`), Payload: ptr("x")}); err != nil {
		t.Fatal(err)
	}
	// A cancel frees one place at once.
	if found, err := c(bs[2]).Cancel(t.Context(), "q-0"); err != nil {
		t.Fatal(err)
	} else if !found {
		if found, err = c(bs[2]).Cancel(t.Context(), "q-1"); err != nil || !found {
			t.Fatalf("cancel: %v %v", found, err)
		}
	}
	post := func(id string) error {
		_, err := c(bs[3]).Send(t.Context(), httpapi.PostRequest{ID: id, Target: "tenant-a.api", Delay: []byte(`"1h"`), Payload: ptr("x")})
		return err
	}
	if err := post("api-1"); err != nil {
		t.Fatalf("POST after a cancel: %v", err)
	}
	var apiErr *client.APIError
	if err := post("api-2"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests {
		t.Fatalf("POST at the limit: %v, want 429", err)
	}
	ts, err := c(bs[1]).Targets(t.Context(), false)
	if err != nil || len(ts.Quotas) != 1 || ts.Quotas[0].Parked != limit || ts.Quotas[0].Limit != limit {
		t.Fatalf("targets quotas %+v %v", ts.Quotas, err)
	}
	var rejected float64
	refusing := 0 // replicas that refused some: the quota held across replicas, not in one
	for _, b := range bs {
		mfs := scrape(t, b)
		if v, _ := metric(mfs, "delaybridge_quota_parked", "pattern", "tenant-a.*"); v != limit {
			t.Fatalf("delaybridge_quota_parked %v, want %d", v, limit)
		}
		v, _ := metric(mfs, "delaybridge_quota_rejected_total", "pattern", "tenant-a.*")
		rejected += v
		if v > 0 {
			refusing++
		}
	}
	if refusing < 2 {
		t.Fatalf("only %d replica refused messages: the flood did not spread", refusing)
	}
	if rejected != total-limit+1 {
		t.Fatalf("delaybridge_quota_rejected_total summed over replicas %v, want %d", rejected, total-limit+1)
	}
}

func ptr(s string) *string { return &s }
