package deploy_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/delaybridge/delaybridge/config"
)

// instruction is one Dockerfile instruction: keyword (upper case) and its arguments,
// continuation lines joined.
type instruction struct {
	cmd, args string
}

// parseDockerfile splits a Dockerfile into instructions: comments and blank lines
// dropped, backslash continuations joined. Enough for the static checks below (no
// heredocs, no parser directives beyond the optional syntax comment).
func parseDockerfile(src string) []instruction {
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasPrefix(t, "#") {
			continue // a comment inside a continued instruction
		}
		if s, ok := strings.CutSuffix(t, "\\"); ok {
			cur.WriteString(strings.TrimSpace(s) + " ")
			continue
		}
		cur.WriteString(t)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// portOf returns the port of a listen address.
func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// checkDockerfile checks the image recipe statically: a Go build stage whose Go matches
// go.mod's go directive and builds a static binary (CGO_ENABLED=0, -trimpath), and a final
// stage on distroless static nonroot with nothing run in it (no shell there), a numeric
// nonroot USER, the HTTP ports exposed and an exec-form ENTRYPOINT.
func checkDockerfile(src, goMod string) error {
	var ps []error
	add := func(format string, args ...any) { ps = append(ps, fmt.Errorf(format, args...)) }
	ins := parseDockerfile(src)
	last := -1
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
	}
	if last < 0 {
		return errors.New("no FROM")
	}
	build, final := ins[:last], ins[last:]

	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(goMod)
	var staticBuild, goImage bool
	for _, in := range build {
		if in.cmd == "FROM" && strings.HasPrefix(in.args, "golang:") {
			goImage = true
			if goVersion != nil && !strings.HasPrefix(in.args, "golang:"+goVersion[1]) {
				add("build stage %q: go.mod wants Go %s", in.args, goVersion[1])
			}
		}
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			staticBuild = strings.Contains(in.args, "CGO_ENABLED=0") && strings.Contains(in.args, "-trimpath")
			if !staticBuild {
				add("RUN %s: want CGO_ENABLED=0 and -trimpath (a static binary: distroless/static has no libc)", in.args)
			}
		}
	}
	if !goImage {
		add("no golang build stage")
	}
	if !staticBuild && len(ps) == 0 {
		add("no `go build` in a build stage")
	}

	base := final[0].args
	if !regexp.MustCompile(`^gcr\.io/distroless/static(-debian\d+)?:(nonroot|[\w.-]*-nonroot)(@sha256:[0-9a-f]{64})?$`).MatchString(base) {
		add("final stage FROM %q: want gcr.io/distroless/static...:nonroot", base)
	}
	var exposed []string
	var user, entrypoint string
	for _, in := range final[1:] {
		switch in.cmd {
		case "RUN":
			add("final stage: RUN %s: distroless has no shell", in.args)
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				exposed = append(exposed, strings.TrimSuffix(p, "/tcp"))
			}
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "HEALTHCHECK":
			if !strings.Contains(in.args, `CMD ["`) {
				add("HEALTHCHECK must be exec form (no shell): %s", in.args)
			}
		}
	}
	if user != "65532" && user != "65532:65532" && user != "nonroot" && user != "nonroot:nonroot" {
		add("final stage USER %q: want 65532:65532 (nonroot)", user)
	}
	if !strings.HasPrefix(entrypoint, "[") {
		add("ENTRYPOINT %q: want exec form (no shell)", entrypoint)
	}
	defaults := map[string]string{}
	for _, v := range config.Variables() {
		defaults[v.Name] = v.Default
	}
	for _, v := range []string{"BRIDGE_HTTP_ADDR", "BRIDGE_API_ADDR"} {
		if p := portOf(defaults[v]); !slices.Contains(exposed, p) {
			add("EXPOSE %v lacks %s, the port of %s's default %q", exposed, p, v, defaults[v])
		}
	}
	return errors.Join(ps...)
}

func TestDockerfile(t *testing.T) {
	src, goMod := string(readFile(t, "../Dockerfile")), string(readFile(t, "../go.mod"))
	if err := checkDockerfile(src, goMod); err != nil {
		t.Fatal(err)
	}
}

func TestDockerfileMutations(t *testing.T) {
	src, goMod := readFile(t, "../Dockerfile"), string(readFile(t, "../go.mod"))
	for _, mu := range []mutation{
		{"cgo on", "CGO_ENABLED=0 go build", "CGO_ENABLED=1 go build", "CGO_ENABLED=0"},
		{"no -trimpath", "go build -trimpath", "go build", "-trimpath"},
		{"root image", "static-debian12:nonroot", "static-debian12:latest", "final stage FROM"},
		{"base with a shell", "FROM gcr.io/distroless/static-debian12:nonroot", "FROM alpine:3.20", "final stage FROM"},
		{"shell in the final stage", "COPY --from=build /out/bridge /usr/local/bin/bridge", "COPY --from=build /out/bridge /usr/local/bin/bridge\nRUN chmod +x /usr/local/bin/bridge", "no shell"},
		{"root user", "USER 65532:65532", "USER root", "USER"},
		{"HTTP port not exposed", "EXPOSE 8080 8081", "EXPOSE 8081", "lacks 8080"},
		{"shell-form entrypoint", `ENTRYPOINT ["/usr/local/bin/bridge"]`, "ENTRYPOINT /usr/local/bin/bridge", "exec form"},
		{"Go older than go.mod", "FROM golang:1.26 AS build", "FROM golang:1.22 AS build", "go.mod wants"},
	} {
		t.Run(mu.name, func(t *testing.T) {
			err := checkDockerfile(string(applyMutation(t, src, mu)), goMod)
			if err == nil {
				t.Fatalf("mutation %q passed the checks", mu.name)
			}
			if !strings.Contains(err.Error(), mu.want) {
				t.Fatalf("mutation %q failed for another reason:\n%v\nwant an error containing %q", mu.name, err, mu.want)
			}
		})
	}
}

func TestParseDockerfile(t *testing.T) {
	got := parseDockerfile("# c\nFROM a AS b\n\nRUN x \\\n  # inner\n  y\nexpose 1\n")
	want := []instruction{{"FROM", "a AS b"}, {"RUN", "x y"}, {"EXPOSE", "1"}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestDockerignoreKeepsTheSource: no .dockerignore pattern drops a directory of Go source
// (a root-level /bridge ignore, meant for a stray `go build` output, once hid package
// bridge from the image's build stage).
func TestDockerignoreKeepsTheSource(t *testing.T) {
	patterns := strings.Split(readText(t, "../.dockerignore"), "\n")
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		goFiles, _ := filepath.Glob(filepath.Join("..", e.Name(), "*.go"))
		sub, _ := filepath.Glob(filepath.Join("..", e.Name(), "*", "*.go"))
		if len(goFiles)+len(sub) == 0 {
			continue
		}
		for _, p := range patterns {
			p = strings.TrimPrefix(strings.TrimSpace(p), "/")
			if p == "" || strings.HasPrefix(p, "#") {
				continue
			}
			if ok, _ := filepath.Match(p, e.Name()); ok {
				t.Errorf(".dockerignore pattern %q drops %s/, which holds Go source", p, e.Name())
			}
		}
	}
}
