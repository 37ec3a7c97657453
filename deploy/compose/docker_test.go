//go:build compose

package compose_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Versions of the tools built from the Go module proxy when missing. natscli v0.5.1 is
// avoided on purpose (the brief of issue 17 names v0.5.0).
const (
	composeModule  = "github.com/docker/compose/v2"
	composeVersion = "v2.40.3"
	natscliModule  = "github.com/nats-io/natscli"
	natscliVersion = "v0.5.0"
)

// run runs a command with env added to the test's own, returning its combined output;
// the error names the command and carries the output.
func run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// cacheDir is where built tools are kept between runs ($XDG_CACHE_HOME or ~/.cache, then
// delaybridge-e2e): outside the repository, so a second run or another worktree reuses them.
func cacheDir(t *testing.T) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("cache dir: %v", err)
	}
	dir := filepath.Join(base, "delaybridge-e2e")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("cache dir: %v", err)
	}
	return dir
}

func onPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// requireDocker makes sure the docker CLI exists (apt-get install docker.io when it can)
// and a daemon answers (it starts dockerd in the background when none does). It fails the
// test, saying why, when either cannot be had: the compose run never skips.
func requireDocker(ctx context.Context, t *testing.T) {
	t.Helper()
	if !onPath("docker") || !onPath("dockerd") {
		// A machine may have the docker client alone (/usr/local/bin/docker): the engine
		// comes with docker.io.
		t.Log("docker or dockerd not found: installing Debian's docker.io")
		env := []string{"DEBIAN_FRONTEND=noninteractive"}
		if _, err := run(ctx, "", env, "apt-get", "install", "-y", "-qq", "docker.io"); err != nil {
			if _, err := run(ctx, "", env, "sh", "-c", "apt-get update -qq && apt-get install -y -qq docker.io"); err != nil {
				t.Fatalf("docker is missing and docker.io could not be installed: %v", err)
			}
		}
	}
	if _, err := run(ctx, "", nil, "docker", "info"); err == nil {
		return
	}
	logPath := filepath.Join(cacheDir(t), "dockerd.log")
	if err := startDockerd(logPath); err != nil {
		t.Fatalf("no Docker daemon answers and dockerd could not be started: %v", err)
	}
	t.Logf("no Docker daemon answered: started dockerd in the background (log: %s)", logPath)
	var last error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if _, last = run(ctx, "", nil, "docker", "info"); last == nil {
			return
		}
	}
	tail, _ := os.ReadFile(logPath)
	if len(tail) > 4000 {
		tail = tail[len(tail)-4000:]
	}
	t.Fatalf("dockerd started but `docker info` still fails after 60 s: %v\ndockerd log tail:\n%s", last, tail)
}

// startDockerd starts dockerd with its default flags (overlay2 or vfs, as it finds)
// detached from the test, in its own session so that it outlives it, output to logPath.
func startDockerd(logPath string) error {
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return fmt.Errorf("dockerd: %w", err)
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("dockerd log: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	return cmd.Process.Release()
}

// moduleTool returns a binary built from pkg of module@version (static, trimmed), cached as
// cacheDir/name-version. It builds inside a copy of the module's own tree, so that its
// go.mod's exclude and replace directives apply (`go install pkg@version` refuses a module
// that has them, as docker/compose does).
func moduleTool(ctx context.Context, t *testing.T, name, module, version, pkg, ldflags string) string {
	t.Helper()
	out := filepath.Join(cacheDir(t), name+"-"+version)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	t.Logf("building %s %s from the Go module proxy (once; cached as %s)", module, version, out)
	start := time.Now()
	js, err := run(ctx, "", nil, "go", "mod", "download", "-json", module+"@"+version)
	if err != nil {
		t.Fatalf("download %s: %v", module, err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal([]byte(js), &info); err != nil || info.Dir == "" {
		t.Fatalf("download %s: no module directory in %q (%v)", module, js, err)
	}
	src := filepath.Join(t.TempDir(), name)
	if _, err := run(ctx, "", nil, "cp", "-r", info.Dir, src); err != nil {
		t.Fatal(err)
	}
	if _, err := run(ctx, "", nil, "chmod", "-R", "u+w", src); err != nil {
		t.Fatal(err)
	}
	tmp := out + ".tmp"
	env := []string{"CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"}
	if _, err := run(ctx, src, env, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", tmp, pkg); err != nil {
		t.Fatalf("build %s: %v", module, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s %s in %s", module, version, time.Since(start).Round(time.Second))
	return out
}

// composeCLI returns the compose v2 CLI: `docker compose` when the plugin is installed,
// else the standalone binary built from the Go module proxy (cached).
func composeCLI(ctx context.Context, t *testing.T) []string {
	t.Helper()
	if out, err := run(ctx, "", nil, "docker", "compose", "version", "--short"); err == nil && strings.HasPrefix(strings.TrimSpace(out), "2.") {
		return []string{"docker", "compose"}
	}
	bin := moduleTool(ctx, t, "docker-compose", composeModule, composeVersion, "./cmd",
		"-s -w -X "+composeModule+"/internal.Version="+composeVersion)
	return []string{bin}
}
