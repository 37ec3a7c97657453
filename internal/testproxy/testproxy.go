package testproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a started toxiproxy proxy. Its methods are safe for concurrent use (toxiproxy
// locks internally).
type Proxy struct {
	p *toxiproxy.Proxy
}

// Start proxies a free 127.0.0.1 port to upstream (host:port) and stops the proxy in
// t.Cleanup. It calls t.Fatal when the proxy does not start.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	p := toxiproxy.NewProxy(srv, t.Name(), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("testproxy: start proxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{p: p}
}

// Addr is the proxy's host:port; it stays the same across Cut and Restore.
func (p *Proxy) Addr() string { return p.p.Listen }

// Cut closes the listener and every proxied connection: new connections are refused
// until Restore.
func (p *Proxy) Cut() { p.p.Stop() }

// Restore listens again on the same address after Cut.
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	if err := p.p.Start(); err != nil {
		t.Fatalf("testproxy: restore %s: %v", p.Addr(), err)
	}
}

// Toxic describes one toxic, as toxiproxy's HTTP API does: Type is "latency", "timeout",
// "reset_peer", "limit_data", "bandwidth", "slow_close", "slicer"; Stream is "downstream"
// (server to client, the default) or "upstream"; Attributes are the type's own (latency:
// "latency" and "jitter" in ms; timeout: "timeout" in ms, 0 = hold forever; limit_data:
// "bytes").
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream,omitempty"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// AddToxic adds tx (Toxicity 0 means 1: every connection) and removes it in t.Cleanup
// unless RemoveToxic did so first.
func (p *Proxy) AddToxic(t testing.TB, tx Toxic) {
	t.Helper()
	if tx.Toxicity == 0 {
		tx.Toxicity = 1
	}
	if tx.Name == "" {
		tx.Name = tx.Type
	}
	body, err := json.Marshal(tx)
	if err != nil {
		t.Fatalf("testproxy: %v", err)
	}
	if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		t.Fatalf("testproxy: add toxic %s: %v", tx.Name, err)
	}
	t.Cleanup(func() { _ = p.p.Toxics.RemoveToxic(context.Background(), tx.Name) })
}

// RemoveToxic removes the toxic named name.
func (p *Proxy) RemoveToxic(t testing.TB, name string) {
	t.Helper()
	if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		t.Fatalf("testproxy: remove toxic %s: %v", name, err)
	}
}

// String names the proxy for test logs.
func (p *Proxy) String() string { return fmt.Sprintf("toxiproxy %s -> %s", p.p.Listen, p.p.Upstream) }
