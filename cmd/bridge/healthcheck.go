package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/delaybridge/delaybridge/config"
)

// runHealthcheck is `bridge healthcheck [--path /readyz] [--url URL]`: one GET against the
// bridge's own operations endpoint, exit status 0 on 200. It lets a container runtime
// probe the bridge in a distroless image, which has no shell, curl or wget (Docker
// HEALTHCHECK, docker compose healthcheck).
func runHealthcheck(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("path", "/readyz", "endpoint to GET: /readyz (Redis and brokers reachable) or /healthz (alive)")
	url := fs.String("url", "", "full URL to GET instead (default: http://<BRIDGE_HTTP_ADDR><path>)")
	timeout := fs.Duration("timeout", 3*time.Second, "bound on the request")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bridge healthcheck [--path P | --url URL] [--timeout D]")
		fs.PrintDefaults()
	}
	pos, err := parseFlags(fs, args)
	if err == nil {
		err = wantArgs(fs, pos, 0)
	}
	if err != nil {
		return err
	}
	target := *url
	if target == "" {
		addr := config.EnvMap(environ)[config.Prefix+"HTTP_ADDR"]
		if addr == "" {
			addr = httpAddrDefault()
		}
		target = "http://" + localAddr(addr) + *path
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s: %s: %s", target, resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = stdout.Write(body)
	return err
}

// httpAddrDefault is the default of BRIDGE_HTTP_ADDR, from the config struct tags.
func httpAddrDefault() string {
	for _, v := range config.Variables() {
		if v.Name == config.Prefix+"HTTP_ADDR" {
			return v.Default
		}
	}
	return ":8080"
}

// localAddr turns a listen address into one to dial from the same host: an empty or
// unspecified host (":8080", "0.0.0.0:8080", "[::]:8080") becomes 127.0.0.1.
func localAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
