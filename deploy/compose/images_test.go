//go:build compose

package compose_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delaybridge/deploy/compose"
)

// imageDirs maps each service to its folder under images/.
var imageDirs = map[string]string{
	"redis": "redis", "nats": "nats", "nats-init": "nats-init", "kafka": "kafka-standin", "bridge": "bridge",
}

// imageLabel marks the local images, so that superseded ones can be pruned.
const imageLabel = "org.delaybridge.e2e=compose"

// buildImages builds every local image (compose.Images) from images/<dir>/Dockerfile plus
// the binaries and files put into a copy of that folder. The legacy builder: no buildx here.
func buildImages(ctx context.Context, t *testing.T, root string) {
	t.Helper()
	start := time.Now()
	bin := t.TempDir()
	files := map[string]map[string]string{ // service -> context path -> host file
		"bridge":    {"bridge": buildBridge(ctx, t, root, bin), "ca-certificates.crt": "/etc/ssl/certs/ca-certificates.crt"},
		"nats":      {"nats-server": goBuild(ctx, t, root, bin, "github.com/nats-io/nats-server/v2"), "busybox": busybox(ctx, t)},
		"nats-init": {"nats": natsCLI(ctx, t), "busybox": busybox(ctx, t)},
		"kafka":     {"kfake-standin": goBuild(ctx, t, root, bin, "./deploy/compose/kfake-standin")},
		"redis":     redisRootfs(ctx, t),
	}
	for svc, image := range compose.Images {
		dir := filepath.Join(t.TempDir(), svc)
		mustRun(ctx, t, "", "cp", "-r", filepath.Join(root, "deploy/compose/images", imageDirs[svc]), dir)
		for dst, src := range files[svc] {
			mustRun(ctx, t, "", "mkdir", "-p", filepath.Dir(filepath.Join(dir, dst)))
			mustRun(ctx, t, "", "cp", "-rL", src, filepath.Join(dir, dst))
		}
		if svc == "bridge" {
			mustRun(ctx, t, "", "cp", "-r", "/usr/share/zoneinfo", filepath.Join(dir, "zoneinfo"))
			mustRun(ctx, t, "", "mkdir", "-p", filepath.Join(dir, "tmp"))
			mustRun(ctx, t, "", "chmod", "1777", filepath.Join(dir, "tmp"))
		}
		if _, err := run(ctx, dir, []string{"DOCKER_BUILDKIT=0"}, "docker", "build", "-q", "--label", imageLabel, "-t", image, "."); err != nil {
			t.Fatalf("build image %s: %v", image, err)
		}
	}
	// A new bridge binary leaves the previous image untagged: drop those of ours only.
	if _, err := run(ctx, "", nil, "docker", "image", "prune", "-f", "--filter", "label="+imageLabel); err != nil {
		t.Logf("prune untagged local images: %v", err)
	}
	t.Logf("built the local images in %s", time.Since(start).Round(time.Second))
}

func mustRun(ctx context.Context, t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	out, err := run(ctx, dir, nil, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// buildBridge builds the bridge as the Dockerfile's build stage does (compose.BridgeBuild).
func buildBridge(ctx context.Context, t *testing.T, root, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "bridge")
	version := "compose-e2e"
	if v, err := run(ctx, root, nil, "git", "describe", "--tags", "--always", "--dirty"); err == nil {
		version = strings.TrimSpace(v)
	}
	mustRun(ctx, t, root, "sh", "-c", "VERSION="+version+" "+compose.BridgeBuild+" -o "+out+" ./cmd/bridge")
	return out
}

// goBuild builds a static binary of pkg in the repository's module (its go.mod pins the version).
func goBuild(ctx context.Context, t *testing.T, root, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(strings.TrimSuffix(pkg, "/v2")))
	if _, err := run(ctx, root, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg); err != nil {
		t.Fatalf("build %s: %v", pkg, err)
	}
	return out
}

// natsCLI is the nats CLI of natscli v0.5.0, built once and cached.
func natsCLI(ctx context.Context, t *testing.T) string {
	t.Helper()
	return moduleTool(ctx, t, "nats", natscliModule, natscliVersion, "./nats", "-s -w")
}

// busybox is Debian's static busybox (sh, wget), installed when missing.
func busybox(ctx context.Context, t *testing.T) string {
	t.Helper()
	const path = "/bin/busybox"
	if out, err := run(ctx, "", nil, "ldd", path); err != nil && strings.Contains(out, "not a dynamic") {
		return path // static: ldd refuses it
	}
	t.Log("installing Debian's busybox-static (sh and wget for the nats images)")
	if _, err := run(ctx, "", []string{"DEBIAN_FRONTEND=noninteractive"}, "apt-get", "install", "-y", "-qq", "busybox-static"); err != nil {
		t.Fatalf("busybox-static: %v", err)
	}
	return path
}

var lddPath = regexp.MustCompile(`(?m)(?:=> )?(/\S+) \(0x`)

// redisRootfs is the host's redis-server and redis-cli with every shared library ldd
// names, at their own paths (symbolic links resolved): a root filesystem for scratch.
func redisRootfs(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, b := range []string{"redis-server", "redis-cli"} {
		path := "/usr/bin/" + b
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: %v (Debian's redis-server and redis-tools; .ci/run installs them)", b, err)
		}
		files["rootfs"+path] = path
		for _, m := range lddPath.FindAllStringSubmatch(mustRun(ctx, t, "", "ldd", path), -1) {
			files["rootfs"+m[1]] = m[1]
		}
	}
	return files
}
