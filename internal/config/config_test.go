package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/internal/testpki"
	"github.com/lagbridge/lagbridge/quota"
)

func writeFile(tb testing.TB, body string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "lagbridge.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

func load(tb testing.TB, args ...string) (Config, error) {
	tb.Helper()
	fs := Flags("test")
	if err := fs.Parse(args); err != nil {
		tb.Fatal(err)
	}
	return Load(fs)
}

const good = `
quota: {auth: {mode: none}}   # the default listen (all interfaces) without tokens
interval: 500ms
log: {level: debug, format: json}
rules: {lagAge: 2s}
kafka:
  - cluster: main
    brokers: ["127.0.0.1:9092"]
    groups: {include: ["billing.*"], exclude: ["billing-test"]}
    sasl: {mechanism: SCRAM-SHA-512, username: u, password: p}
    requestTimeout: 3s
nats:
  - cluster: js
    urls: ["nats://127.0.0.1:4222"]
    streams: {include: ["ORDERS"]}
`

func TestLoadGood(t *testing.T) {
	c, err := load(t, "--config", writeFile(t, good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 500*time.Millisecond || c.Listen != DefaultListen || c.Log.Level != "debug" {
		t.Fatalf("top level: %+v", c)
	}
	k := c.Kafka[0]
	if k.Cluster != "main" || k.SASL.Mechanism != "SCRAM-SHA-512" || k.RequestTimeout != 3*time.Second || k.Groups.Exclude[0] != "billing-test" {
		t.Fatalf("kafka: %+v", k)
	}
	if c.NATS[0].Streams.Include[0] != "ORDERS" {
		t.Fatalf("nats: %+v", c.NATS[0])
	}
	if r := c.Lag(); r.LagAge != 2*time.Second || r.StaleAfter != 3*time.Second {
		t.Fatalf("rules: %+v", r)
	}
}

// TestAbandonAndReportRules: rules.abandonAfter and rules.reportFresh reach
// the lag rules, also from the environment; negative values are refused.
func TestAbandonAndReportRules(t *testing.T) {
	c, err := load(t, "--config", writeFile(t, strings.Replace(good, "rules: {lagAge: 2s}", "rules: {lagAge: 2s, abandonAfter: 90s, reportFresh: 5s}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Lag(); r.AbandonAfter != 90*time.Second || r.ReportFresh != 5*time.Second {
		t.Fatalf("rules: %+v", r)
	}
	_, err = load(t, "--config", writeFile(t, strings.Replace(good, "rules: {lagAge: 2s}", "rules: {abandonAfter: -1s, reportFresh: -1s}", 1)))
	if err == nil || !strings.Contains(err.Error(), "rules.abandonAfter:") || !strings.Contains(err.Error(), "rules.reportFresh:") {
		t.Fatalf("negative values: %v", err)
	}
	t.Setenv("LAGBRIDGE_RULES_ABANDONAFTER", "10m")
	if c, err = load(t, "--config", writeFile(t, good)); err != nil || c.Lag().AbandonAfter != 10*time.Minute {
		t.Fatalf("from the environment: %v, %v", c.Lag().AbandonAfter, err)
	}
}

// TestEveryProblemAtOnce is the contract of `lagbridge check`: one run names
// every mistake in the file, each with its place.
func TestEveryProblemAtOnce(t *testing.T) {
	bad := `
listen: "nohost"
interval: 10ms
log: {level: loud, format: xml}
rules: {lagAge: -1s}
kafak: []
kafka:
  - cluster: main
    brokers: []
  - cluster: main
    brokers: ["127.0.0.1"]
    sasl: {mechanism: KERBEROS}
nats:
  - urls: ["nats://127.0.0.1:4222"]
    user: a
    token: b
`
	_, err := load(t, "--config", writeFile(t, bad))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		"listen:", "interval:", "log.level:", "log.format:", "rules.lagAge:", "kafak",
		"kafka[0].brokers:", "kafka[1].cluster:", "kafka[1].brokers[0]:", "kafka[1].sasl",
		"nats[0].cluster:",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	if !errors.Is(err, kafka.ErrInvalidConfig) {
		t.Errorf("kafka problems do not match kafka.ErrInvalidConfig")
	}
}

// TestPrecedence: flags over env over file over defaults.
func TestPrecedence(t *testing.T) {
	p := writeFile(t, "interval: 2s\nlisten: ':1'\nquota: {auth: {mode: none}}\nkafka: [{cluster: a, brokers: ['127.0.0.1:9092']}]\n")
	t.Setenv("LAGBRIDGE_INTERVAL", "3s")
	t.Setenv("LAGBRIDGE_LOG_LEVEL", "warn")
	c, err := load(t, "--config", p, "--listen", ":2")
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 3*time.Second || c.Listen != ":2" || c.Log.Level != "warn" {
		t.Fatalf("got interval %v listen %q level %q", c.Interval, c.Listen, c.Log.Level)
	}
	t.Setenv("LAGBRIDGE_CONFIG", p)
	if _, err := load(t); err != nil {
		t.Fatalf("config from env: %v", err)
	}
}

// TestNoFileSaysSo: run without --config names the missing file, not
// only the missing clusters it would hold.
func TestNoFileSaysSo(t *testing.T) {
	t.Setenv("LAGBRIDGE_CONFIG", "")
	_, err := load(t, "--listen", "127.0.0.1:9464")
	if err == nil || !strings.Contains(err.Error(), "no config file given: pass --config FILE (or set LAGBRIDGE_CONFIG)") {
		t.Fatalf("got %v", err)
	}
	_, err = load(t, "--config", writeFile(t, "listen: 127.0.0.1:9464\n"))
	if err == nil || !strings.Contains(err.Error(), "no cluster to watch: configure at least one") {
		t.Fatalf("with a file: %v", err)
	}
}

func TestMissingFile(t *testing.T) {
	_, err := load(t, "--config", filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("err = %v", err)
	}
}

func TestQuotaSection(t *testing.T) {
	body := `
kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]
nats: [{cluster: js, urls: ['nats://127.0.0.1:4222']}]
quota:
  leaseLifetime: 20s
  maxProducers: 5000
  natsKV: {cluster: js}
  kafkaClientQuotas: {bytesPerMessage: 512}
  auth:
    tokens: [{token: "0123456789abcdef", producers: [svc-a]}]
  policies:
    - name: orders
      match: {topic: "orders.*"}
      maxAge: 2s
      hardAge: 10s
      kafkaClientQuota: true
      unlisted: {admit: sheddable, max: 4}
      producers:
        - {id: svc-a, weight: 2, criticality: CRITICAL_PLUS}
        - {id: batch, criticality: sheddable}
`
	c, err := load(t, "--config", writeFile(t, body))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Quota.Policies[0]
	if p.MaxAge != 2*time.Second || p.Producers[0].Criticality.String() != "CRITICAL_PLUS" || p.Producers[1].Criticality.String() != "SHEDDABLE" || !p.KafkaClientQuota ||
		p.Unlisted != (quota.Unlisted{Admit: quota.AdmitSheddable, Max: 4}) || c.Quota.MaxProducers != 5000 {
		t.Fatalf("policy %+v, maxProducers %d", p, c.Quota.MaxProducers)
	}
	bad := `
kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]
quota:
  leaseLifetime: 1ms
  maxProducers: -1
  natsKV: {cluster: nowhere}
  auth: {tokens: [{token: short, producers: []}]}
  policies:
    - {name: a, maxAge: 0s}
    - {name: a, maxAge: 1s, producers: [{id: x, criticality: URGENT}], unlisted: {admit: everyone}}
`
	_, err = load(t, "--config", writeFile(t, bad))
	for _, want := range []string{"quota.leaseLifetime", "quota.maxProducers", "quota.policies[1].unlisted.admit", "quota.natsKV.cluster", "quota.auth.tokens[0].token", "quota.policies[0].maxAge", "quota.policies[1].producers[0].criticality"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

func TestTTLSection(t *testing.T) {
	body := `
listen: 127.0.0.1:9464
kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]
quota:
  policies:
    - {name: soft, maxAge: 2s}
    - {name: hard, maxAge: 2s, hardAge: 10s}
ttl:
  streamCheckInterval: 30s
  enforce:
    - {policy: hard, kafkaOffsetMove: true, natsStream: true, allowMsgTTL: true, apply: true}
`
	c, err := load(t, "--config", writeFile(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.TTL.Enforce[0]; !r.KafkaOffsetMove || !r.Apply || c.TTL.StreamCheckInterval != 30*time.Second {
		t.Fatalf("ttl %+v", c.TTL)
	}
	bad := `
kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]
quota: {policies: [{name: soft, maxAge: 2s}]}
ttl:
  enforce:
    - {policy: nope}
    - {policy: soft, kafkaOffsetMove: true, allowMsgTTL: true}
`
	_, err = load(t, "--config", writeFile(t, bad))
	for _, want := range []string{"ttl.enforce[0].policy", "ttl.enforce[1].kafkaOffsetMove: policy \"soft\" needs a hardAge", "ttl.enforce[1].allowMsgTTL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

// secretFile writes body to a file of its own, as a Kubernetes Secret
// mounted as a volume or a systemd credential would be, and returns its
// path.
func secretFile(tb testing.TB, name, body string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestSecretFiles pins the way secrets reach settings inside lists, which
// no LAGBRIDGE_* variable can: every password and token has a <key>File
// setting read at load, losing one trailing newline; the admin tokens file
// holds one token per line.
func TestSecretFiles(t *testing.T) {
	body := fmt.Sprintf(`
kafka:
  - cluster: k
    brokers: ['127.0.0.1:9092']
    sasl: {mechanism: PLAIN, username: u, passwordFile: %q}
nats:
  - {cluster: a, urls: ['nats://127.0.0.1:4222'], tokenFile: %q}
  - {cluster: b, urls: ['nats://127.0.0.1:4222'], user: u, passwordFile: %q}
quota:
  auth:
    tokens: [{tokenFile: %q, producers: [svc-a]}]
    adminTokensFile: %q
`,
		secretFile(t, "kafka", "kafka pass\n\n"), // one newline trimmed, the other is the password's
		secretFile(t, "nats-token", "nats-token\r\n"),
		secretFile(t, "nats-password", "nats-password"),
		secretFile(t, "producer", "0123456789abcdef-producer\n"),
		secretFile(t, "admins", "0123456789abcdef-admin-1\n\n  0123456789abcdef-admin-2  \n"))
	c, err := load(t, "--config", writeFile(t, body))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct{ what, got, want string }{
		{"kafka password", c.Kafka[0].SASL.Password, "kafka pass\n"},
		{"nats token", c.NATS[0].Token, "nats-token"},
		{"nats password", c.NATS[1].Password, "nats-password"},
		{"producer token", c.Quota.Auth.Tokens[0].Token, "0123456789abcdef-producer"},
		{"admin tokens", strings.Join(c.Quota.Auth.AdminTokens, ","), "0123456789abcdef-admin-1,0123456789abcdef-admin-2"},
	} {
		if g.got != g.want {
			t.Errorf("%s = %q, want %q", g.what, g.got, g.want)
		}
	}
}

// TestSecretFileProblems pins how secret files fail: inline and file
// together is refused, and a file that cannot be read or is empty is named,
// with the other problems of the config and without a second "required"
// for the value it should have given.
func TestSecretFileProblems(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-secret")
	body := fmt.Sprintf(`
interval: 1ms
kafka:
  - cluster: k
    brokers: ['127.0.0.1:9092']
    sasl: {mechanism: PLAIN, username: u, password: inline, passwordFile: %q}
  - cluster: l
    brokers: ['127.0.0.1:9092']
    sasl: {mechanism: PLAIN, username: u, passwordFile: %q}
nats:
  - {cluster: a, urls: ['nats://127.0.0.1:4222'], tokenFile: %q}
quota:
  auth:
    tokens: [{tokenFile: %q, producers: [svc-a]}]
    adminTokensFile: %q
`, secretFile(t, "p", "x"), missing, secretFile(t, "empty", "\n"), missing, secretFile(t, "blank", "\n  \n"))
	_, err := load(t, "--config", writeFile(t, body))
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		"interval:",
		"kafka[0].sasl.passwordFile: set together with kafka[0].sasl.password",
		"kafka[1].sasl.passwordFile: open " + missing,
		"nats[0].tokenFile: ",
		"is empty",
		"quota.auth.tokens[0].tokenFile: open " + missing,
		"quota.auth.adminTokensFile: ",
		"holds no token",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	for _, unwanted := range []string{"kafka[1].sasl.password:", "quota.auth.tokens[0].token:"} {
		if strings.Contains(msg, unwanted) {
			t.Errorf("an unreadable secret is also reported as %q:\n%s", unwanted, msg)
		}
	}
}

// TestAdminTokensNeedProducerTokens pins the refusal of admin tokens
// without producer tokens: any token turns the quota protocol's
// authentication on, so such a config would answer 401 to every producer.
func TestAdminTokensNeedProducerTokens(t *testing.T) {
	body := "kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\nquota: {auth: {adminTokens: ['0123456789abcdef-admin']}}\n"
	_, err := load(t, "--config", writeFile(t, body))
	if err == nil || !strings.Contains(err.Error(), "quota.auth.adminTokens: set without quota.auth.tokens") {
		t.Fatalf("admin tokens alone accepted: %v", err)
	}
	body = "kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\nquota: {auth: {adminTokens: ['0123456789abcdef-admin'], tokens: [{token: '0123456789abcdef-svc', producers: ['*'], maxIds: 50}]}}\n"
	if _, err := load(t, "--config", writeFile(t, body)); err != nil {
		t.Fatalf("admin and producer tokens: %v", err)
	}
}

// TestIntegerRange pins that a number that does not fit its setting is
// reported with the setting's name instead of wrapped (4294967296 in the
// int32 headFetchMaxBytes used to become 0, the default) or truncated.
func TestIntegerRange(t *testing.T) {
	body := `
kafka:
  - cluster: k
    brokers: ['127.0.0.1:9092']
    headFetchMaxBytes: 4294967296
    headFetchPartitionBytes: 99999999999
nats:
  - {cluster: a, urls: ['nats://127.0.0.1:4222'], maxListPages: 1.5}
`
	_, err := load(t, "--config", writeFile(t, body))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"kafka[0].headFetchMaxBytes: 4294967296 is out of range: must be from -2147483648 to 2147483647",
		"kafka[0].headFetchPartitionBytes: 99999999999 is out of range",
		"nats[0].maxListPages: 1.5 is not a whole number",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	body = "listen: 127.0.0.1:9464\nkafka: [{cluster: k, brokers: ['127.0.0.1:9092'], headFetchMaxBytes: 2147483647, headFetchPartitionBytes: 1048576.0}]\n"
	c, err := load(t, "--config", writeFile(t, body))
	if err != nil || c.Kafka[0].HeadFetchMaxBytes != 2147483647 || c.Kafka[0].HeadFetchPartitionBytes != 1<<20 {
		t.Fatalf("in range: %v %+v", err, c.Kafka)
	}
}

// TestDurationWithoutUnit pins that a bare number for a duration setting
// is refused with its name and a hint, once, instead of being read as
// nanoseconds (requestTimeout: 5 made every Kafka request time out, and
// check said the config was fine); 0, the default, stays accepted.
func TestDurationWithoutUnit(t *testing.T) {
	body := `
interval: 1
shutdownTimeout: true
listen: 127.0.0.1:9464
kafka:
  - {cluster: k, brokers: ['127.0.0.1:9092'], requestTimeout: 5}
quota: {policies: [{name: a, maxAge: 2.5, hardAge: 0}]}
`
	_, err := load(t, "--config", writeFile(t, body))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"interval: 1 has no unit: write a duration such as 1s or 1ms",
		"kafka[0].requestTimeout: 5 has no unit",
		"shutdownTimeout: true is not a duration",
		"quota.policies[0].maxAge: 2.5 has no unit",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "interval:"); n != 1 {
		t.Errorf("interval reported %d times:\n%v", n, err)
	}
	body = "listen: 127.0.0.1:9464\nkafka: [{cluster: k, brokers: ['127.0.0.1:9092'], requestTimeout: 0}]\n"
	c, err := load(t, "--config", writeFile(t, body), "--interval", "2s")
	if err != nil || c.Interval != 2*time.Second || c.Kafka[0].RequestTimeout != 0 {
		t.Fatalf("0 and --interval 2s: %v %v %v", err, c.Interval, c.Kafka[0].RequestTimeout)
	}
}

// TestProducerAsString: `producers: [checkout]` is reported once, with how
// a producer is written, not also as a producer without an id.
func TestProducerAsString(t *testing.T) {
	body := "listen: 127.0.0.1:9464\nkafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\nquota: {policies: [{name: a, maxAge: 2s, producers: [checkout]}]}\n"
	_, err := load(t, "--config", writeFile(t, body))
	want := "quota.policies[0].producers[0]: expected a map (key: value), got string: a producer is written {id: NAME, criticality: CRITICAL}"
	if err == nil || err.Error() != want {
		t.Fatalf("got:\n%v\nwant:\n%s", err, want)
	}
}

// TestNotANumber: a word where a number or a boolean goes is reported
// with the word, from the file and from the environment; numbers written
// as strings still decode.
func TestNotANumber(t *testing.T) {
	t.Setenv("LAGBRIDGE_HA_SHARDS", "abc")
	body := `
listen: 127.0.0.1:9464
kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]
quota: {maxProducers: lots, policies: [{name: a, maxAge: 2s, minRate: fast, producers: [{id: c, weight: "2"}]}]}
ha: {enabled: maybe}
`
	_, err := load(t, "--config", writeFile(t, body))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`quota.maxProducers: "lots" is not a whole number`,
		`quota.policies[0].minRate: "fast" is not a number`,
		`ha.enabled: "maybe" is not true or false`,
		`ha.shards: "abc" is not a whole number`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "weight") {
		t.Errorf("weight \"2\" refused:\n%v", err)
	}
	t.Setenv("LAGBRIDGE_HA_SHARDS", "")
	t.Setenv("LAGBRIDGE_HISTORY_EVENTS", "300")
	c, err := load(t, "--config", writeFile(t, "listen: 127.0.0.1:9464\nkafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\n"))
	if err != nil || c.History.Events != 300 {
		t.Fatalf("env number: %v, events %d", err, c.History.Events)
	}
}

// TestDuplicatePolicyBesideOtherProblems: `lagbridge check` names a
// duplicate policy even while the first policy of that name is invalid.
func TestDuplicatePolicyBesideOtherProblems(t *testing.T) {
	body := "kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\nquota: {policies: [{name: a, maxAge: 0s}, {name: a, maxAge: 1s}]}\n"
	_, err := load(t, "--config", writeFile(t, body))
	for _, want := range []string{"quota.policies[0].maxAge", `quota.policies[1].name: duplicates policies[0] ("a")`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

// TestNATSURLsAndBucket pins that `lagbridge check` refuses what nats.go
// would never dial ("::::": the daemon would run and never be ready) and
// KV bucket names NATS refuses (every publish would fail), each once.
func TestNATSURLsAndBucket(t *testing.T) {
	body := `
nats:
  - {cluster: js, urls: ['nats://127.0.0.1:4222', '::::', 'ftp://x']}
quota: {natsKV: {cluster: js, bucket: "bad bucket!"}}
`
	_, err := load(t, "--config", writeFile(t, body))
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{`nats[0].urls[1]: "::::"`, "nats[0].urls[2]:", `quota.natsKV.bucket: "bad bucket!" is not a NATS KV bucket name`} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	if strings.Count(msg, "nats[0].urls[2]:") != 1 {
		t.Errorf("urls[2] reported more than once:\n%s", msg)
	}
	if strings.Contains(msg, "urls[0]") {
		t.Errorf("a good URL refused:\n%s", msg)
	}
}

// TestStaleAfterCoversInfoInterval pins the default staleAfter against the
// slowest NATS refresh: a NATS observer repeats its readings, and their
// time, between refreshes, so a staleAfter below infoInterval would mark
// its targets stale between refreshes. An explicit staleAfter is kept.
func TestStaleAfterCoversInfoInterval(t *testing.T) {
	body := `
listen: 127.0.0.1:9464
interval: 2s
nats:
  - {cluster: a, urls: ['nats://127.0.0.1:4222'], infoInterval: 10s}
  - {cluster: b, urls: ['nats://127.0.0.1:4222'], interval: 5s}
  - {cluster: c, urls: ['nats://127.0.0.1:4222']}
`
	c, err := load(t, "--config", writeFile(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Lag().StaleAfter; got != 30*time.Second {
		t.Fatalf("staleAfter = %v, want 30s (3 x the largest infoInterval)", got)
	}
	c.NATS = c.NATS[1:]
	if got := c.Lag().StaleAfter; got != 15*time.Second {
		t.Fatalf("staleAfter = %v, want 15s (3 x cluster b's interval)", got)
	}
	c.NATS = c.NATS[1:]
	if got := c.Lag().StaleAfter; got != 6*time.Second {
		t.Fatalf("staleAfter = %v, want 6s (3 intervals)", got)
	}
	c.Rules.StaleAfter = 4 * time.Second
	if got := c.Lag().StaleAfter; got != 4*time.Second {
		t.Fatalf("explicit staleAfter changed to %v", got)
	}
	// An explicit staleAfter the refreshes cannot keep up with is refused:
	// cluster a's readings can be 10s x 1.2 + 2s = 14s old.
	for sa, ok := range map[string]bool{"14s": false, "5s": false, "15s": true} {
		_, err := load(t, "--config", writeFile(t, body+"rules: {staleAfter: "+sa+"}\n"))
		if ok != (err == nil) || err != nil && !strings.Contains(err.Error(), `rules.staleAfter: `+sa+` is not longer than NATS cluster "a"'s longest gap between fresh readings (14s`) {
			t.Errorf("staleAfter %s: %v", sa, err)
		}
	}
}

// TestOpenQuotaProtocol: without tokens the daemon starts only on a
// loopback address or with quota.auth.mode: none; `lagbridge check`
// reports the refusal with what to do, and warns about what is allowed
// but unsafe.
func TestOpenQuotaProtocol(t *testing.T) {
	const kafka = "kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\n"
	cases := []struct {
		name    string
		body    string
		refused bool
		warn    string
	}{
		{"default listen, no tokens", kafka, true, ""},
		{"all interfaces, no tokens", "listen: 0.0.0.0:9464\n" + kafka, true, ""},
		{"loopback, no tokens", "listen: 127.0.0.1:9464\n" + kafka, false, ""},
		{"explicit none", "quota: {auth: {mode: none}}\n" + kafka, false, "quota.auth.mode: none on :9464"},
		{"tokens over plain HTTP", "quota: {auth: {tokens: [{token: token-of-svc-a-0123, producers: [a]}]}}\n" + kafka, false, "bearer tokens travel in clear text"},
		{"tokens on loopback", "listen: 127.0.0.1:1\nquota: {auth: {tokens: [{token: token-of-svc-a-0123, producers: [a]}]}}\n" + kafka, false, ""},
		{"insecure broker TLS", "listen: 127.0.0.1:1\nkafka: [{cluster: k, brokers: ['127.0.0.1:9092'], tls: {enabled: true, insecureSkipVerify: true}}]\n", false, "kafka[0].tls.insecureSkipVerify"},
		{"producer grants on /metrics", "listen: 127.0.0.1:1\nmetrics: {producerGrants: true}\n" + kafka, false, "metrics.producerGrants"},
		// A policy that lists nobody serves only unlisted producers,
		// 32 per topic; one that lists a producer, or says what
		// unlisted ones get, is not warned about.
		{"a policy listing nobody", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s}]}\n" + kafka, false, `quota.policies[0].producers: policy "p" lists nobody`},
		{"a policy listing a producer", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, producers: [{id: a}]}]}\n" + kafka, false, ""},
		{"a policy refusing unlisted ids", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, unlisted: {admit: refuse}}]}\n" + kafka, false, ""},
		{"a policy admitting 100 unlisted ids", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, unlisted: {max: 100}}]}\n" + kafka, false, ""},
		// Broker-native quotas go by each listed producer's client.id: a
		// policy that lists nobody sets none (before: not a word).
		{"client quotas for nobody", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, kafkaClientQuota: true, unlisted: {max: 100}}]}\n" + kafka, false,
			`quota.policies[0].kafkaClientQuota: policy "p" lists no producer, so it sets no Kafka client quota`},
		{"client quotas for a listed producer", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, kafkaClientQuota: true, producers: [{id: a}]}]}\n" + kafka, false, ""},
		// A listed id the quota protocol refuses (here a space) can
		// never report: before, check said nothing and the SDK refused
		// the id at NewKafka. With client quotas it is still a plain
		// client's client.id.
		{"an id no SDK may use", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, producers: [{id: a}, {id: 'odd id'}]}]}\n" + kafka, false,
			`quota.policies[0].producers[1].id: "odd id" is not a producer id the SDK or the quota protocol accepts (1-128 characters of A-Z a-z 0-9 . _ : -), so this entry serves nobody`},
		{"a client.id no SDK may use", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, kafkaClientQuota: true, producers: [{id: 'svc/a'}]}]}\n" + kafka, false,
			`quota.policies[0].producers[0].id: "svc/a" is not a producer id the SDK or the quota protocol accepts (1-128 characters of A-Z a-z 0-9 . _ : -), so it reaches only a plain Kafka client with this client.id`},
		// A policy whose match names no cluster of the config (a typo
		// in match.cluster, a kind no cluster has) limits nobody; before,
		// check said nothing and the daemon warned only after it ran.
		{"a policy matching no cluster", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, producers: [{id: a}], match: {cluster: kk}}]}\n" + kafka, false,
			`quota.policies[0].match: policy "p" matches none of the clusters this config watches (kafka k), so it limits no producer`},
		{"a policy matching no cluster of its kind", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, producers: [{id: a}], match: {kind: nats}}]}\n" + kafka, false,
			`quota.policies[0].match: policy "p" matches none of the clusters this config watches (kafka k)`},
		{"a policy matching its cluster by pattern", "listen: 127.0.0.1:1\nquota: {policies: [{name: p, maxAge: 1s, producers: [{id: a}], match: {cluster: 'k|x', topic: orders}}]}\n" + kafka, false, ""},
		// Kafka client quotas on a policy that matches only NATS
		// clusters set nothing.
		{"client quotas on NATS only", "listen: 127.0.0.1:1\nnats: [{cluster: n, urls: ['nats://127.0.0.1:4222']}]\nquota: {policies: [{name: p, maxAge: 1s, kafkaClientQuota: true, producers: [{id: a}], match: {cluster: n}}]}\n" + kafka, false,
			`quota.policies[0].kafkaClientQuota: policy "p" matches no Kafka cluster of this config, so it sets no Kafka client quota`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := load(t, "--config", writeFile(t, c.body))
			if c.refused {
				if err == nil || !strings.Contains(err.Error(), "quota.auth: the quota protocol would be open to anyone") || !strings.Contains(err.Error(), "quota.auth.mode: none") {
					t.Fatalf("not refused with a clear message: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := strings.Join(cfg.Warnings(), "\n")
			if (c.warn == "") != (w == "") || !strings.Contains(w, c.warn) {
				t.Fatalf("warnings %q, want %q", w, c.warn)
			}
		})
	}
}

// TestServerTLSSettings: the daemon's TLS settings are checked at load,
// files included, every problem at once.
func TestServerTLSSettings(t *testing.T) {
	const base = "listen: 127.0.0.1:1\nkafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]\n"
	_, err := load(t, "--config", writeFile(t, base+"tls: {certFile: /nonexistent/c.pem, clientAuth: always, minVersion: '1.1'}\n"))
	for _, want := range []string{"tls.certFile, tls.keyFile: set both or neither", `tls.clientAuth: "always" is not require or verifyIfGiven`, `tls.minVersion: "1.1" is not 1.2 or 1.3`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	_, err = load(t, "--config", writeFile(t, base+"tls: {certFile: /nonexistent/c.pem, keyFile: /nonexistent/k.pem, clientCAFile: /nonexistent/ca.pem}\n"))
	for _, want := range []string{"tls.certFile: open /nonexistent/c.pem", "tls.clientCAFile: open /nonexistent/ca.pem"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	_, err = load(t, "--config", writeFile(t, base+"tls: {minVersion: '1.3'}\n"))
	if err == nil || !strings.Contains(err.Error(), "would serve plain HTTP") {
		t.Errorf("TLS settings without a certificate accepted: %v", err)
	}
}

// TestCaseTwinKeys: two keys of one mapping that differ only in case name
// one setting (keys are not case-sensitive); the file is refused with
// both named instead of one value being dropped silently.
func TestCaseTwinKeys(t *testing.T) {
	body := `
listen: 127.0.0.1:9464
kafka:
  - {cluster: k, brokers: ['127.0.0.1:9092']}
quota:
  policies:
    - name: a
      maxAge: 2s
      maxage: 20s
`
	_, err := load(t, "--config", writeFile(t, body))
	if err == nil || !strings.Contains(err.Error(), `quota.policies[0].maxage: "maxAge" and "maxage" name the same setting`) {
		t.Fatalf("err %v", err)
	}
}

// TestUnknownKeySuggestion: a misspelt key is named as the file spells it
// (the decoder sees it lowercased: "kafka[0].requesttimout" before) and,
// when a setting of that place is a letter or two away, with that
// setting's spelling. A key far from every setting gets no guess.
func TestUnknownKeySuggestion(t *testing.T) {
	_, err := load(t, "--config", writeFile(t, `
listen: "127.0.0.1:9464"
intervall: 1s
kafak: []
kafka:
  - cluster: main
    brokers: ["127.0.0.1:9092"]
    requestTimout: 3s
    colour: blue
quota:
  policies:
    - {name: p, maxage: 2s, maxAge: 2s, hardage: 3s, kafkaClientQuotas: true}
`))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		`intervall: unknown key (misspelt, or not a setting of this version); did you mean "interval"?`,
		`kafak: unknown key (misspelt, or not a setting of this version); did you mean "kafka"?`,
		`kafka[0].requestTimout: unknown key (misspelt, or not a setting of this version); did you mean "requestTimeout"?`,
		`kafka[0].colour: unknown key (misspelt, or not a setting of this version)` + "\n",
		`quota.policies[0].kafkaClientQuotas: unknown key (misspelt, or not a setting of this version); did you mean "kafkaClientQuota"?`,
	} {
		if !strings.Contains(msg+"\n", want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

// TestEditDistance: letters added, dropped, changed, and two neighbours
// swapped each count one.
func TestEditDistance(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"kafka", "kafka", 0}, {"", "abc", 3}, {"abc", "", 3},
		{"intervall", "interval", 1}, {"requesttimout", "requesttimeout", 1}, {"kafak", "kafka", 1},
		{"cafle", "cafile", 1}, {"colour", "cluster", 5}, {"ab", "ba", 1}, {"abcd", "badc", 2},
	}
	for _, c := range cases {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestEnvReachesNestedSettings: LAGBRIDGE_<KEY> reaches every setting
// outside a list, also one the file does not set (the README: "Every
// top-level setting is also ... an environment variable"); before, only
// the keys with a default (listen, interval, shutdownTimeout, log, rules,
// history, ha) did, and LAGBRIDGE_QUOTA_MAXPRODUCERS=-1 or
// LAGBRIDGE_METRICS_PRODUCERGRANTS=true were ignored without a word
// unless the file set that key too.
func TestEnvReachesNestedSettings(t *testing.T) {
	t.Setenv("LAGBRIDGE_QUOTA_MAXPRODUCERS", "7")
	t.Setenv("LAGBRIDGE_METRICS_PRODUCERGRANTS", "true")
	t.Setenv("LAGBRIDGE_QUOTA_AUTH_MODE", "none")
	t.Setenv("LAGBRIDGE_QUOTA_KAFKACLIENTQUOTAS_BYTESPERMESSAGE", "72")
	c, err := load(t, "--config", writeFile(t, "listen: 127.0.0.1:9464\nkafka: [{cluster: main, brokers: ['127.0.0.1:9092']}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Quota.MaxProducers != 7 || !c.Metrics.ProducerGrants || c.Quota.Auth.Mode != "none" || c.Quota.KafkaClientQuotas.BytesPerMessage != 72 {
		t.Errorf("maxProducers %d, producerGrants %v, auth.mode %q, bytesPerMessage %v: want 7, true, none, 72",
			c.Quota.MaxProducers, c.Metrics.ProducerGrants, c.Quota.Auth.Mode, c.Quota.KafkaClientQuotas.BytesPerMessage)
	}
	// A bad value from the environment is refused like one from the file.
	t.Setenv("LAGBRIDGE_QUOTA_MAXPRODUCERS", "-1")
	if _, err := load(t, "--config", writeFile(t, "listen: 127.0.0.1:9464\nkafka: [{cluster: main, brokers: ['127.0.0.1:9092']}]\n")); err == nil ||
		!strings.Contains(err.Error(), "quota.maxProducers") {
		t.Errorf("maxProducers -1 from the environment: %v", err)
	}
}

// TestDurationStringSaysWhatIsWrong: a duration given as text that does
// not parse (any environment variable, a quoted YAML value) is named with
// its value and what to write; before, LAGBRIDGE_INTERVAL=5 read
// "interval: time: missing unit in duration", without the value, while
// the same 5 in the file read "5 has no unit: write a duration such as 5s".
func TestDurationStringSaysWhatIsWrong(t *testing.T) {
	t.Setenv("LAGBRIDGE_INTERVAL", "5")
	t.Setenv("LAGBRIDGE_SHUTDOWNTIMEOUT", "soon")
	_, err := load(t, "--config", writeFile(t, "listen: 127.0.0.1:9464\nkafka: [{cluster: main, brokers: ['127.0.0.1:9092']}]\nrules: {lagAge: \"1.5\"}\n"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`interval: "5" has no unit: write a duration such as 5s or 5ms`,
		`shutdownTimeout: "soon" is not a duration: write one such as 5s or 500ms`,
		`rules.lagAge: "1.5" has no unit: write a duration such as 1.5s or 1.5ms`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestReloadAuth: ReloadAuth reads the token files again and returns the
// config's auth with their current tokens, validated; a file that does
// not read, an empty one, or a token put in a second role leaves the
// loaded auth and says why. Inline tokens and everything else stay.
func TestReloadAuth(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return testpki.Write(t, dir, name, []byte(body)) }
	prod, admins, reads := write("producer", "0123456789abcdef-producer\n"), write("admins", "0123456789abcdef-admin-1\n"), write("reads", "0123456789abcdef-read-1\n")
	c, err := load(t, "--config", writeFile(t, fmt.Sprintf(`
listen: 127.0.0.1:9464
kafka: [{cluster: k, brokers: ['127.0.0.1:9092']}]
quota:
  auth:
    tokens:
      - {tokenFile: %q, producers: [svc-a]}
      - {token: 0123456789abcdef-inline, producers: ["batch-*"], maxIds: 3}
    adminTokensFile: %q
    readTokensFile: %q
`, prod, admins, reads)))
	if err != nil {
		t.Fatal(err)
	}
	if a, changed, err := c.ReloadAuth(); err != nil || changed || !reflect.DeepEqual(a, c.Quota.Auth) {
		t.Fatalf("unchanged files: changed %v, err %v, auth %+v", changed, err, a)
	}
	write("producer", "0123456789abcdef-rotated\n")
	write("admins", "0123456789abcdef-admin-2\n0123456789abcdef-admin-3\n")
	a, changed, err := c.ReloadAuth()
	if err != nil || !changed {
		t.Fatalf("rotated: changed %v, err %v", changed, err)
	}
	want := c.Quota.Auth
	want.Tokens = []quotaserver.Token{{Token: "0123456789abcdef-rotated", Producers: []string{"svc-a"}}, c.Quota.Auth.Tokens[1]}
	want.AdminTokens = []string{"0123456789abcdef-admin-2", "0123456789abcdef-admin-3"}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("rotated: %+v\nwant %+v", a, want)
	}
	if c.Quota.Auth.Tokens[0].Token != "0123456789abcdef-producer" {
		t.Errorf("ReloadAuth changed the loaded config's token: %q", c.Quota.Auth.Tokens[0].Token)
	}
	bad := []struct {
		name, file, body, msg string
	}{
		{"empty", "producer", "", "quota.auth.tokens[0].tokenFile: " + prod + " is empty"},
		{"too short", "producer", "short\n", "auth.tokens[0].token: must be at least 16 characters"},
		{"two roles", "reads", "0123456789abcdef-inline\n", "auth.readTokens[0]: the same as auth.tokens[1].token"},
		{"blank list", "admins", "\n \n", "quota.auth.adminTokensFile: " + admins + " holds no token"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			write("producer", "0123456789abcdef-producer\n")
			write("admins", "0123456789abcdef-admin-1\n")
			write("reads", "0123456789abcdef-read-1\n")
			write(b.file, b.body)
			a, changed, err := c.ReloadAuth()
			if err == nil || !strings.Contains(err.Error(), b.msg) || changed || !reflect.DeepEqual(a, c.Quota.Auth) {
				t.Errorf("changed %v, err %v, auth %+v; want the loaded auth and an error with %q", changed, err, a, b.msg)
			}
		})
	}
	if err := os.Remove(prod); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ReloadAuth(); err == nil || !strings.Contains(err.Error(), "quota.auth.tokens[0].tokenFile:") {
		t.Errorf("a removed file: %v", err)
	}
}

// TestEngagedInterval: the observation interval while a policy is engaged
// defaults to a quarter of the interval, at least 250 ms (so none at a
// 250 ms interval); one equal to the interval or above turns it off; one
// out of 250ms..1m is refused with the other problems, from the file or
// the environment.
func TestEngagedInterval(t *testing.T) {
	const base = "listen: 127.0.0.1:9464\nkafka: [{cluster: main, brokers: ['127.0.0.1:9092']}]\n"
	for _, c := range []struct {
		yaml string
		want time.Duration
	}{
		{"", 250 * time.Millisecond},
		{"interval: 4s\n", time.Second},
		{"interval: 250ms\n", 250 * time.Millisecond},
		{"engagedInterval: 250ms\n", 250 * time.Millisecond},
		{"engagedInterval: 1s\n", time.Second},
		{"engagedInterval: 5s\n", time.Second},
	} {
		cfg, err := load(t, "--config", writeFile(t, base+c.yaml))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if got := cfg.EngagedCadence(); got != c.want {
			t.Errorf("%q: engaged cadence %v, want %v", c.yaml, got, c.want)
		}
	}
	for _, bad := range []string{"engagedInterval: 50ms\ninterval: 10ms\n", "engagedInterval: 100ms\n", "engagedInterval: 2m\n", "engagedInterval: -1s\n"} {
		_, err := load(t, "--config", writeFile(t, base+bad))
		if err == nil || !strings.Contains(err.Error(), "engagedInterval: must be from 250ms to 1m") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	t.Setenv("LAGBRIDGE_ENGAGEDINTERVAL", "300ms")
	if cfg, err := load(t, "--config", writeFile(t, base)); err != nil || cfg.EngagedCadence() != 300*time.Millisecond {
		t.Errorf("LAGBRIDGE_ENGAGEDINTERVAL=300ms: %v, %v", cfg.EngagedCadence(), err)
	}
}

// TestNATSInfoFollowsEngagedInterval: a NATS cluster that keeps the
// daemon's interval fetches its streams' infos at most every engaged
// interval, so that the faster cycles read fresh infos rather than
// repeat the last ones; an infoInterval or a cluster interval set in the
// file is kept.
func TestNATSInfoFollowsEngagedInterval(t *testing.T) {
	c, err := load(t, "--config", writeFile(t, `
listen: 127.0.0.1:9464
nats:
  - {cluster: a, urls: ['nats://127.0.0.1:4222']}
  - {cluster: b, urls: ['nats://127.0.0.1:4222'], infoInterval: 2s}
  - {cluster: c, urls: ['nats://127.0.0.1:4222'], interval: 5s}
`))
	if err != nil {
		t.Fatal(err)
	}
	ns := c.ObservedNATS()
	for i, want := range []time.Duration{250 * time.Millisecond, 2 * time.Second, 5 * time.Second} {
		if got := ns[i].WithDefaults().InfoInterval; got != want {
			t.Errorf("cluster %s: infoInterval %v, want %v", ns[i].Cluster, got, want)
		}
	}
	if got := c.Lag().StaleAfter; got != 15*time.Second {
		t.Errorf("staleAfter %v, want 15s (3 x cluster c's)", got)
	}
}

// TestNearCapacitySetting: nearCapacity is on unless set false, from the
// file or the environment; true with the engaged cadence off is refused
// with the other problems, and a number (the fraction it is not) is not
// read as true.
func TestNearCapacitySetting(t *testing.T) {
	const base = "listen: 127.0.0.1:9464\nkafka: [{cluster: main, brokers: ['127.0.0.1:9092']}]\n"
	for _, c := range []struct {
		yaml string
		want bool
	}{
		{"", true},
		{"nearCapacity: true\n", true},
		{"nearCapacity: false\n", false},
		{"nearcapacity: false\n", false},
		{"nearCapacity: false\nengagedInterval: 1s\n", false},
		{"interval: 250ms\n", true},    // unset: no refusal, the engaged cadence off does the rest
		{"nearCapacity: \"\"\n", true}, // empty: unset, the default, as for every other setting
	} {
		cfg, err := load(t, "--config", writeFile(t, base+c.yaml))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if got := cfg.NearCapacityOn(); got != c.want {
			t.Errorf("%q: near capacity %v, want %v", c.yaml, got, c.want)
		}
	}
	for _, c := range []struct{ yaml, want string }{
		{"nearCapacity: true\nengagedInterval: 1s\n", "nearCapacity: true needs the engaged cadence, which is off: engagedInterval 1s is not shorter than the interval 1s"},
		{"nearCapacity: true\ninterval: 250ms\n", "nearCapacity: true needs the engaged cadence, which is off: engagedInterval 250ms (its default at this interval) is not shorter than the interval 250ms"},
		{"nearCapacity: 0.9\n", "nearCapacity: 0.9 is not true or false"},
		{"nearCapacity: 2\n", "nearCapacity: 2 is not true or false"},
		{"nearCapacity: on\n", `nearCapacity: "on" is not true or false`},
	} {
		_, err := load(t, "--config", writeFile(t, base+c.yaml+"shutdownTimeout: -1s\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "shutdownTimeout: must be positive") {
			t.Errorf("%q: %v; want %q with the other problem", c.yaml, err, c.want)
		}
	}
	// 1 and 0 are true and false, in the file as in the environment
	// (strconv.ParseBool), as before numberBoolHook.
	for _, c := range []struct {
		yaml     string
		near, ha bool
	}{{"nearCapacity: 0\n", false, false}, {"nearCapacity: 1\nha: {enabled: 1}\n", true, true}, {"ha: {enabled: 0}\n", true, false}} {
		cfg, err := load(t, "--config", writeFile(t, base+c.yaml))
		if err != nil || cfg.NearCapacityOn() != c.near || cfg.HA.Enabled != c.ha {
			t.Errorf("%q: near capacity %v, ha %v, %v; want %v, %v", c.yaml, cfg.NearCapacityOn(), cfg.HA.Enabled, err, c.near, c.ha)
		}
	}
	t.Setenv("LAGBRIDGE_NEARCAPACITY", "false")
	if cfg, err := load(t, "--config", writeFile(t, base)); err != nil || cfg.NearCapacityOn() {
		t.Errorf("LAGBRIDGE_NEARCAPACITY=false: %v, %v", cfg.NearCapacityOn(), err)
	}
}
