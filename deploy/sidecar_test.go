// Package deploy_test checks the deployment files offline, as `make test` runs them:
// deploy/sidecar.yaml (strict decode against k8s.io/api), deploy/docker-compose.yml
// (compose-go with schema validation) and the Dockerfile (static checks). Every check has a
// mutation test: a known-bad edit of the real file must make it fail.
package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/delaybridge/delaybridge/config"
)

// bridgeContainer is the name of the delaybridge container in sidecar.yaml.
const bridgeContainer = "bridge"

// minGraceMargin is how much longer than BRIDGE_SHUTDOWN_TIMEOUT the pod's termination
// grace period must be: with a native sidecar the app stops first, out of the same budget.
const minGraceMargin = 10 * time.Second

// sidecarManifest is the content of sidecar.yaml, decoded.
type sidecarManifest struct {
	deployment *appsv1.Deployment
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
}

// splitDocuments splits a multi-document YAML stream at its "---" separator lines and
// drops documents that hold only comments or blanks.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if hasContent(cur.Bytes()) {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if t := strings.TrimRight(line, " \t\r\n"); t == "---" || strings.HasPrefix(t, "--- ") {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

func hasContent(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

// decodeSidecar strictly decodes every document of sidecar.yaml by its kind: an unknown
// field, a duplicate field or a value of the wrong type is an error, as it is for
// `kubectl apply` with server-side field validation. Only Deployment, ConfigMap and
// Secret documents are expected; exactly one Deployment.
func decodeSidecar(b []byte) (*sidecarManifest, error) {
	m := &sidecarManifest{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for i, doc := range splitDocuments(b) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		var err error
		switch kind := head.APIVersion + "/" + head.Kind; kind {
		case "apps/v1/Deployment":
			if m.deployment != nil {
				return nil, fmt.Errorf("document %d: a second Deployment", i+1)
			}
			m.deployment = &appsv1.Deployment{}
			err = strictDecode(doc, m.deployment)
		case "v1/ConfigMap":
			cm := &corev1.ConfigMap{}
			if err = strictDecode(doc, cm); err == nil {
				m.configMaps[cm.Name] = cm
			}
		case "v1/Secret":
			s := &corev1.Secret{}
			if err = strictDecode(doc, s); err == nil {
				m.secrets[s.Name] = s
			}
		default:
			return nil, fmt.Errorf("document %d: unexpected %q", i+1, kind)
		}
		if err != nil {
			return nil, fmt.Errorf("document %d (%s %s): %w", i+1, head.APIVersion, head.Kind, err)
		}
	}
	if m.deployment == nil {
		return nil, errors.New("no apps/v1 Deployment")
	}
	return m, nil
}

// strictDecode decodes one YAML document into v with sigs.k8s.io/yaml's UnmarshalStrict
// (unknown and duplicate fields are errors), then once more with sigs.k8s.io/json's
// strict, case-sensitive decoder, as the API server's strict field validation does:
// encoding/json alone would accept "livenessprobe" for "livenessProbe", which the API
// server rejects (or, without strict validation, silently drops).
func strictDecode(doc []byte, v any) error {
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return err
	}
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// knownVariables are the variables the bridge reads (config.Variables, which lists the
// *_FILE variants of the secrets too).
func knownVariables() map[string]bool {
	known := map[string]bool{}
	for _, v := range config.Variables() {
		known[v.Name] = true
	}
	return known
}

// checkBridgeNames returns a problem for every BRIDGE_* name the bridge does not know.
func checkBridgeNames(where string, names []string) []error {
	known := knownVariables()
	var ps []error
	for _, n := range names {
		if strings.HasPrefix(n, config.Prefix) && !known[n] {
			ps = append(ps, fmt.Errorf("%s: %s is not a variable of the bridge (see `bridge --help`)", where, n))
		}
	}
	return ps
}

// checkSidecar checks the decoded sidecar manifest; it returns every problem at once.
func checkSidecar(m *sidecarManifest, secretDir string) error {
	var ps []error
	add := func(format string, args ...any) { ps = append(ps, fmt.Errorf(format, args...)) }
	spec := m.deployment.Spec.Template.Spec

	// Every BRIDGE_* name set anywhere: ConfigMap keys (all of them: a ConfigMap here
	// exists only to be envFrom'd into the bridge) and every container's env.
	for name, cm := range m.configMaps {
		var keys []string
		for k := range cm.Data {
			keys = append(keys, k)
			if !strings.HasPrefix(k, config.Prefix) {
				add("ConfigMap %s: key %s does not start with %s (envFrom would pass it, the bridge would ignore it)", name, k, config.Prefix)
			}
		}
		ps = append(ps, checkBridgeNames("ConfigMap "+name, keys)...)
	}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		var names []string
		for _, e := range c.Env {
			names = append(names, e.Name)
		}
		ps = append(ps, checkBridgeNames("container "+c.Name+" env", names)...)
		if c.Name != bridgeContainer && strings.Contains(c.Image, "delaybridge") {
			add("container %s runs the delaybridge image but is not the %q init container", c.Name, bridgeContainer)
		}
	}

	// The bridge: a native sidecar.
	var bridge *corev1.Container
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == bridgeContainer {
			bridge = &spec.InitContainers[i]
		}
	}
	if bridge == nil {
		add("no init container named %q", bridgeContainer)
		return errors.Join(ps...)
	}
	if bridge.RestartPolicy == nil || *bridge.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		add("init container %s: restartPolicy must be Always (a native sidecar); without it the pod waits for the bridge to exit", bridge.Name)
	}

	env, envProblems := bridgeEnv(m, bridge, secretDir)
	ps = append(ps, envProblems...)
	cfg, err := config.Load(env)
	if err == nil {
		err = cfg.ValidateForRun()
	}
	if err != nil {
		add("the bridge would not start with this configuration:\n%w", err)
		return errors.Join(ps...)
	}

	// Probes on the configured port: liveness on /healthz, startup on /readyz, and no
	// readinessProbe on /readyz (a native sidecar's readiness gates the whole pod).
	_, httpPort, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil {
		add("BRIDGE_HTTP_ADDR %q: %w", cfg.HTTPAddr, err)
	}
	probe := func(kind string, p *corev1.Probe, wantPath string) {
		if p == nil {
			add("%s: no %s", bridge.Name, kind)
			return
		}
		if p.HTTPGet == nil {
			add("%s: %s is not an httpGet", bridge.Name, kind)
			return
		}
		if p.HTTPGet.Path != wantPath {
			add("%s: %s path %q, want %q", bridge.Name, kind, p.HTTPGet.Path, wantPath)
		}
		if port := resolvePort(bridge, p.HTTPGet.Port); port != httpPort {
			add("%s: %s port %s resolves to %q, but BRIDGE_HTTP_ADDR listens on %q", bridge.Name, kind, p.HTTPGet.Port.String(), port, httpPort)
		}
	}
	probe("livenessProbe", bridge.LivenessProbe, "/healthz")
	probe("startupProbe", bridge.StartupProbe, "/readyz")
	if p := bridge.ReadinessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path == "/readyz" {
		add("%s: readinessProbe on /readyz takes every replica out of its Service when Redis blips (a native sidecar's readiness gates the pod)", bridge.Name)
	}

	// Termination: the app stops first, then the bridge drains for up to the timeout.
	grace := time.Duration(-1)
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if grace < cfg.ShutdownTimeout+minGraceMargin {
		add("terminationGracePeriodSeconds %v must be at least BRIDGE_SHUTDOWN_TIMEOUT (%v) + %v", grace, cfg.ShutdownTimeout, minGraceMargin)
	}

	// Resources: requests for scheduling, a memory limit against runaway growth.
	r := bridge.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() {
		add("%s: set resources.requests cpu and memory", bridge.Name)
	}
	if r.Limits.Memory().IsZero() {
		add("%s: set resources.limits.memory", bridge.Name)
	}

	// The selector selects the template.
	for k, v := range m.deployment.Spec.Selector.MatchLabels {
		if m.deployment.Spec.Template.Labels[k] != v {
			add("selector %s=%s does not match the pod template's labels", k, v)
		}
	}
	return errors.Join(ps...)
}

// resolvePort returns the container port a probe port names (number or port name).
func resolvePort(c *corev1.Container, p intstr.IntOrString) string {
	if p.Type == intstr.Int {
		return strconv.Itoa(p.IntValue())
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return strconv.Itoa(int(cp.ContainerPort))
		}
	}
	return "(no port named " + p.StrVal + ")"
}

// bridgeEnv computes the bridge's environment as the kubelet would: envFrom ConfigMaps
// and Secrets of this file, then env (which wins). A *_FILE variable must name a file in a
// Secret volume mounted into the bridge, with that key in the Secret; its value is
// rewritten to a copy of the Secret's value under secretDir, so config.Load reads it.
func bridgeEnv(m *sidecarManifest, c *corev1.Container, secretDir string) (map[string]string, []error) {
	var ps []error
	add := func(format string, args ...any) { ps = append(ps, fmt.Errorf(format, args...)) }
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := m.configMaps[from.ConfigMapRef.Name]
			if !ok {
				add("%s: envFrom ConfigMap %q is not in the file", c.Name, from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			s, ok := m.secrets[from.SecretRef.Name]
			if !ok {
				add("%s: envFrom Secret %q is not in the file", c.Name, from.SecretRef.Name)
				continue
			}
			var keys []string
			for k, v := range secretData(s) {
				env[from.Prefix+k] = v
				keys = append(keys, from.Prefix+k)
			}
			ps = append(ps, checkBridgeNames("Secret "+s.Name+" (envFrom)", keys)...)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secretData(m.secrets[ref.Name])[ref.Key]
			if !ok {
				add("%s: env %s: no key %q in Secret %q of this file", c.Name, e.Name, ref.Key, ref.Name)
			}
			env[e.Name] = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := m.configMaps[ref.Name]
			if !ok {
				add("%s: env %s: ConfigMap %q is not in the file", c.Name, e.Name, ref.Name)
				continue
			}
			env[e.Name] = cm.Data[ref.Key]
		}
	}
	for name, p := range env {
		if !strings.HasPrefix(name, config.Prefix) || !strings.HasSuffix(name, "_FILE") {
			continue
		}
		if !strings.Contains(name, "PASSWORD") && !strings.Contains(name, "TOKEN") {
			continue // TLS and credential files: mounted the same way, not rewritten here
		}
		value, err := secretFileValue(m, c, p)
		if err != nil {
			add("%s: %s=%s: %w", c.Name, name, p, err)
			continue
		}
		local := filepath.Join(secretDir, strings.ToLower(name))
		if err := os.WriteFile(local, []byte(value), 0o600); err != nil {
			add("%s: %w", name, err)
			continue
		}
		env[name] = local
	}
	return env, ps
}

// secretFileValue returns the content the kubelet would put at path p in container c: p
// must lie in a mounted Secret volume (Secret in this file, key present).
func secretFileValue(m *sidecarManifest, c *corev1.Container, p string) (string, error) {
	for _, vm := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path.Clean(p), strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range m.deployment.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			if v.Secret == nil {
				return "", fmt.Errorf("volume %s is not a Secret", v.Name)
			}
			s, ok := m.secrets[v.Secret.SecretName]
			if !ok {
				return "", fmt.Errorf("Secret %q is not in the file", v.Secret.SecretName)
			}
			key := rel
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			value, ok := secretData(s)[key]
			if !ok {
				return "", fmt.Errorf("Secret %q has no key %q", s.Name, key)
			}
			return value, nil
		}
		return "", fmt.Errorf("volumeMount %s names no volume", vm.Name)
	}
	return "", errors.New("not inside a mounted volume of the container")
}

// secretData merges a Secret's data and stringData (stringData wins, as the API server
// does); nil for a nil Secret.
func secretData(s *corev1.Secret) map[string]string {
	if s == nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

func loadAndCheckSidecar(t *testing.T, b []byte) error {
	t.Helper()
	m, err := decodeSidecar(b)
	if err != nil {
		return err
	}
	return checkSidecar(m, t.TempDir())
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSidecarManifest(t *testing.T) {
	b := readFile(t, "sidecar.yaml")
	m, err := decodeSidecar(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSidecar(m, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if len(m.configMaps) == 0 || len(m.secrets) == 0 {
		t.Fatalf("want a ConfigMap and a Secret, got %d and %d", len(m.configMaps), len(m.secrets))
	}
	t.Logf("sidecar.yaml: %d ConfigMap(s), %d Secret(s), grace %ds",
		len(m.configMaps), len(m.secrets), *m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds)
}

// mutation is a known-bad edit of a deployment file: replacing old (which must occur)
// by new must make the checks fail with an error containing want.
type mutation struct {
	name, old, new, want string
}

// applyMutation returns b with the first occurrence of mu.old replaced.
func applyMutation(t *testing.T, b []byte, mu mutation) []byte {
	t.Helper()
	if !bytes.Contains(b, []byte(mu.old)) {
		t.Fatalf("mutation %q: %q is not in the file any more; update the test", mu.name, mu.old)
	}
	return bytes.Replace(b, []byte(mu.old), []byte(mu.new), 1)
}

func TestSidecarManifestMutations(t *testing.T) {
	b := readFile(t, "sidecar.yaml")
	for _, mu := range []mutation{
		{"unknown variable in ConfigMap", "BRIDGE_LOG_LEVEL:", "BRIDGE_LOG_LEVLE:", "BRIDGE_LOG_LEVLE is not a variable"},
		{"unknown variable in env", "name: BRIDGE_API_TOKEN_FILE", "name: BRIDGE_API_TOKN_FILE", "BRIDGE_API_TOKN_FILE is not a variable"},
		{"ConfigMap key without prefix", "BRIDGE_LOG_FORMAT:", "LOG_FORMAT:", "does not start with BRIDGE_"},
		{"missing restartPolicy", "restartPolicy: Always        # this is", "# this is", "restartPolicy must be Always"},
		{"unknown field", "livenessProbe:", "livenesProbe:", `unknown field "livenesProbe"`},
		{"field name in the wrong case", "livenessProbe:", "livenessprobe:", `unknown field "spec.template.spec.initContainers[0].livenessprobe"`},
		{"duplicate field", "imagePullPolicy: IfNotPresent", "imagePullPolicy: IfNotPresent\n          imagePullPolicy: Always", "already set"},
		{"wrong type", "replicas: 2", "replicas: two", "cannot unmarshal"},
		{"grace period too short", "terminationGracePeriodSeconds: 45", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds"},
		{"drain longer than grace", "BRIDGE_SHUTDOWN_TIMEOUT: 25s", "BRIDGE_SHUTDOWN_TIMEOUT: 60s", "terminationGracePeriodSeconds"},
		{"bad variable value", "BRIDGE_SHUTDOWN_TIMEOUT: 25s", "BRIDGE_SHUTDOWN_TIMEOUT: 25 s", "would not start"},
		{"probe port differs from BRIDGE_HTTP_ADDR", `BRIDGE_HTTP_ADDR: ":8080"`, `BRIDGE_HTTP_ADDR: ":9090"`, "listens on"},
		{"liveness on /readyz", "httpGet: {path: /healthz, port: ops}", "httpGet: {path: /readyz, port: ops}", "livenessProbe path"},
		{"readiness on /readyz", "livenessProbe:", "readinessProbe:\n            httpGet: {path: /readyz, port: ops}\n          livenessProbe:", "gates the pod"},
		{"secret file outside the mount", "value: /etc/delaybridge/secrets/api-token", "value: /etc/delaybridge/api-token", "not inside a mounted volume"},
		{"secret key missing", "  api-token: CHANGE-ME", "  apitoken: CHANGE-ME", `no key "api-token"`},
		{"secret as plain env and file", "BRIDGE_LOG_FORMAT: json", "BRIDGE_LOG_FORMAT: json\n  BRIDGE_API_TOKEN: oops", "set only one of"},
		{"no memory limit", "limits: {memory: 256Mi}", "limits: {}", "limits.memory"},
	} {
		t.Run(mu.name, func(t *testing.T) {
			err := loadAndCheckSidecar(t, applyMutation(t, b, mu))
			if err == nil {
				t.Fatalf("mutation %q passed the checks", mu.name)
			}
			if !strings.Contains(err.Error(), mu.want) {
				t.Fatalf("mutation %q failed for another reason:\n%v\nwant an error containing %q", mu.name, err, mu.want)
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	in := "# head\n---\na: 1\n---\n# only a comment\n---   \nb: 2\n--- # c\nc: 3\n"
	got := splitDocuments([]byte(in))
	want := []string{"a: 1\n", "b: 2\n", "c: 3\n"}
	if len(got) != len(want) {
		t.Fatalf("got %d documents %q, want %q", len(got), got, want)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("document %d = %q, want %q", i, got[i], want[i])
		}
	}
}
