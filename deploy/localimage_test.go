package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/delaybridge/delaybridge/deploy/compose"
)

// finalStage returns the instructions of the last stage (from its FROM on).
func finalStage(ins []instruction) []instruction {
	last := 0
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
	}
	return ins[last:]
}

// runtimeShape is what a container of the image sees: USER, EXPOSE, HEALTHCHECK,
// ENTRYPOINT, CMD of the final stage, and where the binary is copied to.
func runtimeShape(ins []instruction) map[string]string {
	shape := map[string]string{}
	for _, in := range finalStage(ins) {
		switch in.cmd {
		case "USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "CMD":
			shape[in.cmd] = in.args
		case "COPY":
			if f := strings.Fields(in.args); strings.HasSuffix(f[len(f)-1], "/bridge") {
				shape["COPY binary to"] = f[len(f)-1]
			}
		}
	}
	return shape
}

// checkLocalImage checks that the local twin (deploy/compose/images/bridge) is built as the
// Dockerfile builds and runs as its image runs: the same build command
// (compose.BridgeBuild), the same runtime shape, FROM scratch with nothing run in it, and
// an /etc/passwd naming nonroot 65532.
func checkLocalImage(upstream, local, passwd string) error {
	var ps []error
	add := func(format string, args ...any) { ps = append(ps, fmt.Errorf(format, args...)) }
	up, lo := parseDockerfile(upstream), parseDockerfile(local)
	built := slices.ContainsFunc(up, func(in instruction) bool {
		return in.cmd == "RUN" && strings.Contains(in.args, compose.BridgeBuild+" -o ")
	})
	if !built {
		add("the Dockerfile no longer runs compose.BridgeBuild (%s): update deploy/compose/doc.go", compose.BridgeBuild)
	}
	if n := slices.IndexFunc(lo, func(in instruction) bool { return in.cmd == "FROM" }); n < 0 || lo[n].args != "scratch" {
		add("local image: want a single FROM scratch stage")
	}
	for _, in := range lo {
		if in.cmd == "RUN" {
			add("local image: RUN %s: the twin of distroless runs nothing", in.args)
		}
	}
	want, got := runtimeShape(up), runtimeShape(lo)
	for _, k := range []string{"USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "CMD", "COPY binary to"} {
		if want[k] == "" || got[k] != want[k] {
			add("%s: local image %q, Dockerfile %q", k, got[k], want[k])
		}
	}
	if !strings.Contains(passwd, "\nnonroot:x:65532:65532:") {
		add("local image /etc/passwd: no nonroot user 65532:65532")
	}
	return errors.Join(ps...)
}

const localDockerfile = "compose/images/bridge/Dockerfile"

func TestLocalImageInStep(t *testing.T) {
	err := checkLocalImage(readText(t, "../Dockerfile"), readText(t, localDockerfile), readText(t, "compose/images/bridge/etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
}

func TestLocalImageInStepMutations(t *testing.T) {
	up, lo, passwd := readFile(t, "../Dockerfile"), readFile(t, localDockerfile), readText(t, "compose/images/bridge/etc/passwd")
	for _, mu := range []struct {
		local bool
		mutation
	}{
		{true, mutation{"root user", "USER 65532:65532", "USER 0:0", "USER"}},
		{true, mutation{"other command", `CMD ["run"]`, `CMD ["dev"]`, "CMD"}},
		{true, mutation{"health check by shell", `CMD ["/usr/local/bin/bridge", "healthcheck"]`, `CMD /usr/local/bin/bridge healthcheck`, "HEALTHCHECK"}},
		{true, mutation{"port not exposed", "EXPOSE 8080 8081", "EXPOSE 8080", "EXPOSE"}},
		{true, mutation{"base with a shell", "\nFROM scratch\n", "\nFROM busybox\n", "FROM scratch"}},
		{false, mutation{"other ldflags", `-ldflags "-s -w -X`, `-ldflags "-X`, "compose.BridgeBuild"}},
		{false, mutation{"binary elsewhere", "COPY --from=build /out/bridge /usr/local/bin/bridge", "COPY --from=build /out/bridge /bridge", "COPY binary to"}},
	} {
		t.Run(mu.name, func(t *testing.T) {
			u, l := up, lo
			if mu.local {
				l = applyMutation(t, lo, mu.mutation)
			} else {
				u = applyMutation(t, up, mu.mutation)
			}
			err := checkLocalImage(string(u), string(l), passwd)
			if err == nil || !strings.Contains(err.Error(), mu.want) {
				t.Fatalf("mutation %q: got %v, want an error containing %q", mu.name, err, mu.want)
			}
		})
	}
}

// TestLocalOverride loads deploy/docker-compose.yml with deploy/compose/local.override.yml
// as `make e2e-compose` does and checks the merged stack: every service on the host
// network with no published port and its local image, every address on 127.0.0.1, and the
// user-facing Redis and NATS flags kept.
func TestLocalOverride(t *testing.T) {
	env := types.Mapping{}
	for _, v := range []string{"E2E_REDIS_PORT", "E2E_NATS_PORT", "E2E_NATS_MONITOR_PORT", "E2E_KAFKA_PORT", "E2E_BRIDGE_HTTP_PORT", "E2E_BRIDGE_API_PORT"} {
		env[v] = "1"
	}
	dir, _ := filepath.Abs(".")
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir: dir,
		ConfigFiles: []types.ConfigFile{
			{Filename: filepath.Join(dir, "docker-compose.yml"), Content: readFile(t, "docker-compose.yml")},
			{Filename: filepath.Join(dir, "compose/local.override.yml"), Content: readFile(t, "compose/local.override.yml")},
		},
		Environment: env,
	}, func(o *loader.Options) { o.SetProjectName("override", true) })
	if err != nil {
		t.Fatal(err)
	}
	base, err := loadCompose(context.Background(), dir, readFile(t, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range p.Services {
		if s.NetworkMode != "host" || len(s.Ports) > 0 || s.Build != nil || s.Image != compose.Images[name] {
			t.Errorf("%s: network %q, ports %v, build %v, image %q: want host, none, none, %q", name, s.NetworkMode, s.Ports, s.Build, s.Image, compose.Images[name])
		}
		for k, v := range s.Environment {
			if strings.HasPrefix(k, "BRIDGE_") && strings.HasSuffix(k, "_ADDR") || strings.HasSuffix(k, "_URL") || strings.HasSuffix(k, "_BROKERS") {
				if v == nil || !strings.Contains(*v, "127.0.0.1:") {
					t.Errorf("%s: %s=%v, want an address on 127.0.0.1", name, k, v)
				}
			}
		}
	}
	for _, svc := range []string{"redis", "nats"} {
		got := strings.Join(p.Services[svc].Command, " ")
		for _, flag := range base.Services[svc].Command {
			if flag != "" && !strings.Contains(got, flag) && flag != "8222" && flag != "redis-server" {
				t.Errorf("%s: the override's command %q drops %q of the user-facing file", svc, got, flag)
			}
		}
	}
}
