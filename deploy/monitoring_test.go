package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The monitoring files: Prometheus alerting rules with their promtool unit tests, and the
// Grafana dashboard. That they name only series the bridge exports is checked against a
// running bridge in e2e (TestMetricsMove).
const (
	rulesFile      = "prometheus/delaybridge-rules.yml"
	rulesTestFile  = "prometheus/delaybridge-rules.test.yml"
	dashboardFile  = "grafana/delaybridge-dashboard.json"
	dashboardDSUID = "${datasource}"
)

// promtool returns the path of promtool, failing the test loudly when it is missing.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found on PATH (%v): install Debian's prometheus package "+
			"(apt-get install --no-install-recommends prometheus); `make test` and .ci/run do it when they can", err)
	}
	return p
}

// runPromtool runs promtool with args in dir and returns its error and output.
func runPromtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestAlertRules(t *testing.T) {
	if out, err := runPromtool(t, ".", "check", "rules", rulesFile); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := runPromtool(t, ".", "test", "rules", rulesTestFile); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestAlertRulesCatchMutations: known-bad edits of the real rules must fail the checks
// TestAlertRules runs, so those checks can fail.
func TestAlertRulesCatchMutations(t *testing.T) {
	for _, m := range []struct{ name, old, new, cmd string }{
		{"bad PromQL", "min by (job, instance) (delaybridge_redis_up) == 0", "min by (job, instance) (delaybridge_redis_up == 0", "check"},
		{"Redis down never fires", "min by (job, instance) (delaybridge_redis_up) == 0", "min by (job, instance) (delaybridge_redis_up) == 2", "test"},
		{"lateness threshold 10 s", "rate(delaybridge_delivery_lateness_seconds_bucket[5m]))) > 1", "rate(delaybridge_delivery_lateness_seconds_bucket[5m]))) > 10", "test"},
		{"stuck alert without for", "max(delaybridge_oldest_overdue_seconds) > 60\n        for: 5m", "max(delaybridge_oldest_overdue_seconds) > 60\n        for: 0m", "test"},
		{"full alert on a blip", "max(avg_over_time(delaybridge_redis_oom[5m])) > 0.5", "max(max_over_time(delaybridge_redis_oom[5m])) > 0.5", "test"},
		{"quota alert summed over replicas", "max by (pattern) (delaybridge_quota_parked)", "sum by (pattern) (delaybridge_quota_parked)", "test"},
		{"quota alert at 99%", "(delaybridge_quota_limit) > 0.9", "(delaybridge_quota_limit) > 0.99", "test"},
	} {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			rules := readText(t, rulesFile)
			if strings.Count(rules, m.old) != 1 {
				t.Fatalf("%s: want %q exactly once in %s", m.name, m.old, rulesFile)
			}
			writeFile(t, filepath.Join(dir, filepath.Base(rulesFile)), strings.Replace(rules, m.old, m.new, 1))
			writeFile(t, filepath.Join(dir, filepath.Base(rulesTestFile)), readText(t, rulesTestFile))
			arg := filepath.Base(rulesFile)
			if m.cmd == "test" {
				arg = filepath.Base(rulesTestFile)
			}
			if out, err := runPromtool(t, dir, m.cmd, "rules", arg); err == nil {
				t.Fatalf("promtool %s rules passed the mutated rules (%s)\n%s", m.cmd, m.name, out)
			}
		})
	}
}

// dashboard is the part of a Grafana dashboard these checks read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ X, Y, W, H int } `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestDashboard(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal([]byte(readText(t, dashboardFile)), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Fatalf("%s: uid %q, title %q: want both", dashboardFile, d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["job"] != "query" {
		t.Fatalf("%s: variables %v, want datasource (a Prometheus picker) and job", dashboardFile, vars)
	}
	if len(d.Panels) < 10 {
		t.Fatalf("%s: %d panels", dashboardFile, len(d.Panels))
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	var exprs []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.UID != dashboardDSUID {
			t.Errorf("panel %q: datasource %q, want %q (the dashboard's picker)", p.Title, p.Datasource.UID, dashboardDSUID)
		}
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q %s: empty query", p.Title, q.RefID)
			}
			exprs = append(exprs, q.Expr)
		}
	}
	if out, err := checkPromQL(t, exprs); err != nil {
		t.Fatalf("dashboard queries are not valid PromQL: %v\n%s", err, out)
	}
	// The check can fail: one broken query among the real ones.
	if _, err := checkPromQL(t, append(exprs, "sum(rate(delaybridge_messages_in_total[$__rate_interval])")); err == nil {
		t.Fatal("checkPromQL passed a query with an unclosed parenthesis")
	}
}

// grafanaVars are the dashboard's variables, replaced by values PromQL accepts.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", ".*")

// checkPromQL parses exprs with promtool, as the expressions of recording rules.
func checkPromQL(t *testing.T, exprs []string) (string, error) {
	t.Helper()
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, err := json.Marshal(grafanaVars.Replace(e)) // a JSON string is a YAML string
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "      - record: dashboard:query%d\n        expr: %s\n", i, q)
	}
	f := filepath.Join(t.TempDir(), "queries.yml")
	writeFile(t, f, b.String())
	return runPromtool(t, ".", "check", "rules", f)
}

// TestMonitoringNamesLookLikeOurs: every series the files name is one of the bridge's
// (delaybridge_*) or of its Go and process collectors; e2e checks them against /metrics.
func TestMonitoringNamesLookLikeOurs(t *testing.T) {
	names := regexp.MustCompile(`\b[a-z][a-z0-9_]*_(total|seconds|messages|shards|bucket|up|oom|error|bytes|all)\b`)
	for _, f := range []string{rulesFile, dashboardFile} {
		for _, n := range names.FindAllString(readText(t, f), -1) {
			if !strings.HasPrefix(n, "delaybridge_") && !strings.HasPrefix(n, "process_") && !strings.HasPrefix(n, "go_") {
				t.Errorf("%s names %s: not a series of the bridge", f, n)
			}
		}
	}
}

// readText is readFile as a string.
func readText(t *testing.T, name string) string {
	t.Helper()
	return string(readFile(t, name))
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
