package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/testpki"
)

// required reports whether a missing external tool must fail the test
// rather than skip it: in CI (scripts/deps.sh installs them).
func required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("LAGBRIDGE_REQUIRE_TOOLS") == "1"
}

// tool returns the path of an external tool, or skips (fails in CI).
func tool(tb testing.TB, name, hint string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if required() {
			tb.Fatalf("%s not found (%s)", name, hint)
		}
		tb.Skipf("%s not found (%s)", name, hint)
	}
	return p
}

func update() bool { return os.Getenv("LAGBRIDGE_UPDATE") == "1" }

// mountedFile is a path the examples and the chart read from a mounted
// Secret: tokens and TLS material.
var mountedFile = regexp.MustCompile(`/etc/lagbridge/(?:(?:secrets|tokens|tls|nats)/[A-Za-z0-9._-]+|[A-Za-z0-9._-]+\.creds)`)

// withMounts returns body with every mounted file replaced by a file in a
// temporary directory holding what a real one would: a token of its own
// (distinct per file, as real Secrets hold: the daemon refuses one token in
// two roles), or the TLS certificate, key or CA of a test CA. The loader
// reads them as it reads the real ones.
func withMounts(tb testing.TB, body []byte) []byte {
	tb.Helper()
	dir := tb.TempDir()
	ca := testpki.NewCA(tb, "deploy-test")
	cert, key := ca.Leaf(tb, "lagbridge", true)
	files := map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.PEM}
	return mountedFile.ReplaceAllFunc(body, func(m []byte) []byte {
		name := filepath.Base(string(m))
		content, ok := files[name]
		if !ok {
			sum := sha256.Sum256(m)
			content = []byte("t0k3n-" + hex.EncodeToString(sum[:12]) + "\n")
		}
		return []byte(testpki.Write(tb, dir, strings.ReplaceAll(string(m[len("/etc/lagbridge/"):]), "/", "-"), content))
	})
}

// loadConfig runs the daemon's config loader on the file at path, as
// `lagbridge run --config path` does, with the Secrets it names mounted
// (withMounts).
func loadConfig(tb testing.TB, path string) (config.Config, error) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	path = filepath.Join(tb.TempDir(), filepath.Base(path))
	if err := os.WriteFile(path, withMounts(tb, b), 0o600); err != nil {
		tb.Fatal(err)
	}
	fs := config.Flags("test")
	if err := fs.Parse([]string{"--config", path}); err != nil {
		tb.Fatal(err)
	}
	return config.Load(fs)
}

// TestExamples: every example config loads cleanly through the real
// loader (unknown keys, types and every Validate rule), and says what its
// name says.
func TestExamples(t *testing.T) {
	cases := []struct {
		file          string
		kafka, nats   int
		policies      int
		wantAuth, kv  bool
		clientQuotaOn bool
	}{
		// Kafka with TLS, SASL, two policies, one with broker client quotas;
		// HTTPS and tokens per producer.
		{file: "kafka.yaml", kafka: 1, policies: 2, wantAuth: true, clientQuotaOn: true},
		// NATS with creds, a policy, leases in a KV bucket, bearer tokens.
		{file: "nats.yaml", nats: 1, policies: 1, wantAuth: true, kv: true},
		// Both brokers from one daemon, one token for every producer.
		{file: "both.yaml", kafka: 1, nats: 1, policies: 2, wantAuth: true},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.file] = true
		t.Run(c.file, func(t *testing.T) {
			cfg, err := loadConfig(t, filepath.Join("examples", c.file))
			if err != nil {
				t.Fatalf("%s does not load:\n%v", c.file, err)
			}
			if len(cfg.Kafka) != c.kafka || len(cfg.NATS) != c.nats || len(cfg.Quota.Policies) != c.policies {
				t.Errorf("kafka %d nats %d policies %d; want %d %d %d", len(cfg.Kafka), len(cfg.NATS), len(cfg.Quota.Policies), c.kafka, c.nats, c.policies)
			}
			if got := len(cfg.Quota.Auth.Tokens) > 0; got != c.wantAuth {
				t.Errorf("auth on: %v, want %v", got, c.wantAuth)
			}
			if got := cfg.Quota.NATSKV.Cluster != ""; got != c.kv {
				t.Errorf("natsKV: %v, want %v", got, c.kv)
			}
			on := false
			for _, p := range cfg.Quota.Policies {
				on = on || p.KafkaClientQuota
			}
			if on != c.clientQuotaOn {
				t.Errorf("kafkaClientQuota: %v, want %v", on, c.clientQuotaOn)
			}
		})
	}
	files, _ := filepath.Glob("examples/*.yaml")
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s has no case in TestExamples", f)
		}
	}
	// The loader is strict: a misspelt key in an example would fail it.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	b, _ := os.ReadFile("examples/both.yaml")
	if err := os.WriteFile(bad, bytes.Replace(b, []byte("maxAge:"), []byte("maxage_:"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(t, bad); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Errorf("a misspelt key was accepted: %v", err)
	}
}

// TestPromtool: the alert rules pass `promtool check rules` and their unit
// tests (`promtool test rules`).
func TestPromtool(t *testing.T) {
	promtool := tool(t, "promtool", "Debian package prometheus; scripts/deps.sh")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestAlertsInChart: the chart's PrometheusRule carries the very same rules.
func TestAlertsInChart(t *testing.T) {
	src, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const copyPath = "helm/lagbridge/files/alerts.yaml"
	if update() {
		if err := os.WriteFile(copyPath, src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, cp) {
		t.Fatalf("%s differs from prometheus/alerts.yaml; run LAGBRIDGE_UPDATE=1 go test ./deploy/", copyPath)
	}
}

// helmCheck runs deploy/helm/check (Helm's lint and template from Helm's Go
// packages, in its own module). The first run on a machine compiles Helm
// (minutes on 2 cores); later runs reuse Go's cache (about a second).
func helmCheck(tb testing.TB, args ...string) string {
	tb.Helper()
	start := time.Now()
	cmd := exec.Command("go", append([]string{"run", "."}, args...)...)
	cmd.Dir = "helm/check"
	// The check module is separate; the main module's flags and
	// workspace must not leak into it.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("helm check %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if d := time.Since(start); d > 10*time.Second {
		tb.Logf("helm check %s took %s (first build of Helm's packages on this machine)", strings.Join(args, " "), d.Round(time.Second))
	}
	return stdout.String()
}

const chart = "../lagbridge"

// manifestHeader starts deploy/manifests/lagbridge.yaml.
const manifestHeader = `# Plain Kubernetes manifests for lagbridge, rendered from deploy/helm/lagbridge
# with its default values (release name "lagbridge"): what
#   helm template lagbridge deploy/helm/lagbridge
# prints. Do not edit: change the chart, then run LAGBRIDGE_UPDATE=1 go test ./deploy/
# (a test fails while this file is out of date). Apply with
#   kubectl apply -n <namespace> -f deploy/manifests/lagbridge.yaml
# after setting the clusters to watch in the ConfigMap.
`

// TestHelm: helm lint (warnings fail) with the default values and with
// every option on; helm template renders objects with the properties the
// issue asks for; the rendered config is a valid lagbridge config; and
// deploy/manifests is the current rendering.
func TestHelm(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build deploy/helm/check")
	}
	for _, values := range [][]string{nil, {"-f", chart + "/ci/all-on-values.yaml"}} {
		out := helmCheck(t, append([]string{"lint", chart}, values...)...)
		t.Logf("helm lint %v: %s", values, strings.TrimSpace(out))
	}

	// Default values: the plain manifests.
	def := helmCheck(t, "template", chart, "--name", "lagbridge")
	want := manifestHeader + def
	const manifests = "manifests/lagbridge.yaml"
	if update() {
		if err := os.WriteFile(manifests, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is out of date with the chart; run LAGBRIDGE_UPDATE=1 go test ./deploy/", manifests)
	}
	objs := decodeAll(t, def)
	// ha is on by default: two replicas and their disruption budget.
	checkObjects(t, objs, []string{"PodDisruptionBudget", "ServiceAccount", "ConfigMap", "Service", "Deployment"})

	all := decodeAll(t, helmCheck(t, "template", chart, "-f", chart+"/ci/all-on-values.yaml", "--name", "lb"))
	checkObjects(t, all, []string{"PodDisruptionBudget", "ServiceAccount", "ConfigMap", "Service", "Deployment", "PrometheusRule", "ServiceMonitor"})
	// ha: two replicas rolled one at a time, on different nodes, named by
	// their pod, at most one disrupted.
	for _, o := range all {
		switch o.Kind {
		case "Deployment":
			pod := get(o.raw, "spec", "template", "spec")
			checks := []struct {
				what      string
				got, want any
			}{
				{"strategy", get(o.raw, "spec", "strategy", "type"), "RollingUpdate"},
				{"anti-affinity topology", get(pod, "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", 0, "podAffinityTerm", "topologyKey"), "kubernetes.io/hostname"},
				{"LAGBRIDGE_HA_ENABLED", get(pod, "containers", 0, "env", 0, "value"), "true"},
				{"LAGBRIDGE_HA_ID from", get(pod, "containers", 0, "env", 1, "valueFrom", "fieldRef", "fieldPath"), "metadata.name"},
				{"LAGBRIDGE_HA_SHARDS", fmt.Sprint(get(pod, "containers", 0, "env", 3, "name"), "=", get(pod, "containers", 0, "env", 3, "value")), "LAGBRIDGE_HA_SHARDS=4"},
			}
			for _, c := range checks {
				if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
					t.Errorf("all-on Deployment %s: %v, want %v", c.what, c.got, c.want)
				}
			}
		case "PodDisruptionBudget":
			if got := get(o.raw, "spec", "maxUnavailable"); fmt.Sprint(got) != "1" {
				t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", got)
			}
		}
	}
	// The PrometheusRule holds the alert rules unchanged.
	for _, o := range all {
		if o.Kind != "PrometheusRule" {
			continue
		}
		var rules struct {
			Groups []struct {
				Rules []struct {
					Alert string `yaml:"alert"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		b, _ := yaml.Marshal(o.Spec)
		if err := yaml.Unmarshal(b, &rules); err != nil || len(rules.Groups) != 1 || len(rules.Groups[0].Rules) < 5 {
			t.Errorf("PrometheusRule spec: %v %+v", err, rules)
		}
	}
	// Secure by default: the default rendering serves the quota protocol
	// with tokens from a Secret the chart does not create.
	for _, o := range objs {
		switch o.Kind {
		case "Secret":
			t.Errorf("the chart renders a Secret %s: tokens must not live in values or manifests", o.Metadata.Name)
		case "ConfigMap":
			if c := o.Data["lagbridge.yaml"]; !strings.Contains(c, "tokenFile: /etc/lagbridge/tokens/producer-token") || !strings.Contains(c, "adminTokensFile: /etc/lagbridge/tokens/admin-tokens") {
				t.Errorf("default config has no tokens from the Secret:\n%s", c)
			}
		case "Deployment":
			pod := get(o.raw, "spec", "template", "spec")
			if got := mountOf(pod, "tokens"); got != "lagbridge-tokens" {
				t.Errorf("tokens volume: Secret %q, want lagbridge-tokens", got)
			}
		}
	}
	// Every option on: HTTPS from the tls Secret, probes over HTTPS.
	for _, o := range all {
		if o.Kind != "Deployment" {
			continue
		}
		pod := get(o.raw, "spec", "template", "spec")
		if mountOf(pod, "tls") != "lagbridge-tls" || mountOf(pod, "tokens") != "lagbridge-auth" {
			t.Errorf("all-on: tls volume %q, tokens volume %q", mountOf(pod, "tls"), mountOf(pod, "tokens"))
		}
		for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
			if got := get(pod, "containers", 0, probe, "httpGet", "scheme"); got != "HTTPS" {
				t.Errorf("all-on: %s scheme %v, want HTTPS", probe, got)
			}
		}
	}
	// auth.mode none says so in the config, and mounts no Secret.
	none := filepath.Join(t.TempDir(), "none.yaml")
	if err := os.WriteFile(none, []byte("auth: {mode: none}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := decodeAll(t, helmCheck(t, "template", chart, "-f", none, "--name", "lb"))
	for _, o := range open {
		if o.Kind == "ConfigMap" && !strings.Contains(o.Data["lagbridge.yaml"], "mode: none") {
			t.Errorf("auth.mode=none: config lacks mode: none:\n%s", o.Data["lagbridge.yaml"])
		}
		if o.Kind == "Deployment" && mountOf(get(o.raw, "spec", "template", "spec"), "tokens") != "" {
			t.Errorf("auth.mode=none still mounts the tokens Secret")
		}
	}
	// Settings the chart owns or cannot serve are refused with a clear message.
	refused := []struct {
		name, values, msg string
	}{
		{"listen in config", "config:\n  listen: \":1\"\n  kafka: [{cluster: a, brokers: [\"k:9092\"]}]\n", "config.listen is set by the chart"},
		{"unknown auth mode", "auth: {mode: open}\n", "auth.mode is \"open\""},
		{"client certs the probes lack", "tls: {secretName: t, clientAuth: require}\n", "refuses the kubelet's probes"},
	}
	for _, c := range refused {
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(bad, []byte(c.values), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", "run", ".", "template", chart, "-f", bad)
		cmd.Dir, cmd.Env = "helm/check", append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), c.msg) {
			t.Errorf("%s was not refused: %v\n%s", c.name, err, out)
		}
	}
}

// mountOf returns the Secret name of the pod's volume called name, or "".
func mountOf(pod any, name string) string {
	vols, _ := get(pod, "volumes").([]any)
	for _, v := range vols {
		if get(v, "name") == name {
			s, _ := get(v, "secret", "secretName").(string)
			return s
		}
	}
	return ""
}

// object is the part of a Kubernetes object the checks read.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec map[string]any    `yaml:"spec"`
	raw  map[string]any
}

func decodeAll(tb testing.TB, docs string) []object {
	tb.Helper()
	var out []object
	dec := yaml.NewDecoder(strings.NewReader(docs))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			tb.Fatalf("rendered YAML does not parse: %v", err)
		}
		var o object
		if err := n.Decode(&o); err != nil {
			tb.Fatal(err)
		}
		if err := n.Decode(&o.raw); err != nil {
			tb.Fatal(err)
		}
		if o.Kind != "" {
			out = append(out, o)
		}
	}
}

// get walks a decoded YAML value along keys and list indexes.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// replicasWanted is the Deployment's replica count for its container c: 1,
// or 2 with ha (LAGBRIDGE_HA_ENABLED set).
func replicasWanted(c any) int {
	env, _ := get(c, "env").([]any)
	for i := range env {
		if get(c, "env", i, "name") == "LAGBRIDGE_HA_ENABLED" {
			return 2
		}
	}
	return 1
}

func checkObjects(t *testing.T, objs []object, kinds []string) {
	t.Helper()
	var got []string
	for _, o := range objs {
		got = append(got, o.Kind)
		if o.Metadata.Labels["app.kubernetes.io/name"] != "lagbridge" {
			t.Errorf("%s %s lacks the standard labels: %v", o.Kind, o.Metadata.Name, o.Metadata.Labels)
		}
		switch o.Kind {
		case "ConfigMap":
			// The config the pod gets is one the daemon accepts.
			p := filepath.Join(t.TempDir(), "lagbridge.yaml")
			if err := os.WriteFile(p, []byte(o.Data["lagbridge.yaml"]), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := loadConfig(t, p); err != nil {
				t.Errorf("the chart's config does not load:\n%v\n%s", err, o.Data["lagbridge.yaml"])
			}
		case "Deployment":
			pod := get(o.raw, "spec", "template", "spec")
			c := get(pod, "containers", 0)
			checks := []struct {
				what string
				got  any
				want any
			}{
				{"liveness probe path", get(c, "livenessProbe", "httpGet", "path"), "/healthz"},
				{"readiness probe path", get(c, "readinessProbe", "httpGet", "path"), "/readyz"},
				{"runAsNonRoot", get(pod, "securityContext", "runAsNonRoot"), true},
				{"readOnlyRootFilesystem", get(c, "securityContext", "readOnlyRootFilesystem"), true},
				{"allowPrivilegeEscalation", get(c, "securityContext", "allowPrivilegeEscalation"), false},
				{"capabilities dropped", get(c, "securityContext", "capabilities", "drop", 0), "ALL"},
				{"memory limit", get(c, "resources", "limits", "memory"), "256Mi"},
				{"cpu request", get(c, "resources", "requests", "cpu"), "50m"},
				{"config arg", get(c, "args", 1), "--config=/etc/lagbridge/lagbridge.yaml"},
				{"port name", get(c, "ports", 0, "name"), "http"},
				{"one replica (two with ha)", get(o.raw, "spec", "replicas"), replicasWanted(c)},
			}
			for _, k := range checks {
				if k.got != k.want {
					t.Errorf("Deployment %s: %v, want %v", k.what, k.got, k.want)
				}
			}
			if get(pod, "securityContext", "runAsUser") == 0 {
				t.Errorf("Deployment runs as root")
			}
		}
	}
	if strings.Join(got, ",") != strings.Join(kinds, ",") {
		t.Errorf("rendered kinds %v, want %v (in Helm's install order)", got, kinds)
	}
}

// TestSystemdUnit: systemd-analyze verify finds nothing to say about the
// unit (it also warns about unknown or misspelt directives), with the
// binary's path pointed at an existing executable, and the hardening
// options are there.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("systemd/lagbridge.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []string{"DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "ProtectHome=yes",
		"PrivateTmp=yes", "PrivateDevices=yes", "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service",
		"RestrictAddressFamilies=", "MemoryDenyWriteExecute=yes", "ProtectKernelTunables=yes"} {
		if !bytes.Contains(unit, []byte(opt)) {
			t.Errorf("unit lacks %q", strings.TrimSpace(opt))
		}
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: only the options were checked")
	}
	dir := t.TempDir()
	tru, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	p := filepath.Join(dir, "lagbridge.service")
	if err := os.WriteFile(p, bytes.ReplaceAll(unit, []byte("/usr/local/bin/lagbridge"), []byte(tru)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", p).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestDockerfile: the image builds a static binary and runs it as a
// non-root user on a minimal base. (No Docker here: this reads the file.)
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, got FROM %v", froms)
	}
	final := froms[len(froms)-1][1]
	if !strings.Contains(final, "distroless/static") && final != "scratch" {
		t.Errorf("final stage %q is not distroless/static or scratch", final)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "USER 65532", "./cmd/lagbridge", "EXPOSE 9464"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if _, err := os.Stat("../cmd/lagbridge"); err != nil {
		t.Errorf("the Dockerfile builds ./cmd/lagbridge: %v", err)
	}
}

// TestGrafanaJSON: the dashboard is valid JSON Grafana can import: unique
// panel ids, every panel on the data source variable, inside the 24-column
// grid. (The metric names are checked against a live daemon in
// integration/dashboard_test.go.)
func TestGrafanaJSON(t *testing.T) {
	b, err := os.ReadFile("grafana/lagbridge.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) < 10 {
		t.Fatalf("uid %q title %q panels %d", d.UID, d.Title, len(d.Panels))
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q is not on the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
		}
	}
}
