package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lagbridge/lagbridge/brokers/kafka"
)

// TestIgnoredEnv: a LAGBRIDGE_* variable that no setting reads is a
// warning of Load's Config, with the setting it is a letter or two from,
// or with the list it names an element of; a setting's own variable, the
// CLI's and the tests' are not. Before, viper passed over them without a
// word (a new user's LAGBRIDGE_LISTN left the daemon on :9464).
func TestIgnoredEnv(t *testing.T) {
	t.Setenv("LAGBRIDGE_LISTN", "127.0.0.1:9000")
	t.Setenv("LAGBRIDGE_QUOTA_POLICIES_0_MAXAGE", "1s")
	t.Setenv("LAGBRIDGE_NOSUCHTHING", "1")
	t.Setenv("LAGBRIDGE_INTERVAL", "2s")            // a setting
	t.Setenv("LAGBRIDGE_KAFKA_BOOTSTRAP", "x:9092") // the tests'
	t.Setenv("LAGBRIDGE_URL", "http://127.0.0.1:1") // the CLI's
	c, err := load(t, "--config", writeFile(t, good))
	if err != nil {
		t.Fatal(err)
	}
	got := envWarnings(c)
	want := []string{
		"environment: LAGBRIDGE_LISTN is not a setting and is ignored (did you mean LAGBRIDGE_LISTEN?)",
		"environment: LAGBRIDGE_NOSUCHTHING is not a setting and is ignored",
		"environment: LAGBRIDGE_QUOTA_POLICIES_0_MAXAGE is not a setting and is ignored: quota.policies is a list, which only the config file sets",
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c.Interval.String() != "2s" {
		t.Errorf("LAGBRIDGE_INTERVAL=2s read as %v", c.Interval)
	}
}

// TestIgnoredEnvReadByViper: a variable for a key the file sets is read
// by viper's AutomaticEnv, lists and secret lists included, so it is no
// warning (review-lead: LAGBRIDGE_QUOTA_AUTH_ADMINTOKENSFILE replaced the
// file's admin tokens while the log said it was ignored); hints are a
// letter or two from the part after LAGBRIDGE_ (LAGBRIDGE_TOKEN_FILE was
// "did you mean LAGBRIDGE_TLS_KEYFILE?"), and name LAGBRIDGE_CONFIG too.
func TestIgnoredEnvReadByViper(t *testing.T) {
	t.Setenv("LAGBRIDGE_QUOTA_AUTH_READTOKENS", "0123456789abcdef-env")
	t.Setenv("LAGBRIDGE_TOKEN_FILE", "x")
	t.Setenv("LAGBRIDGE_CONFG", "x")
	body := strings.Replace(good, "quota: {auth: {mode: none}}", "quota: {auth: {mode: none, readTokens: ['0123456789abcdef-file']}}", 1)
	c, err := load(t, "--config", writeFile(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Quota.Auth.ReadTokens; len(got) != 1 || got[0] != "0123456789abcdef-env" {
		t.Fatalf("read tokens %q: the environment's should replace the file's", got)
	}
	got := envWarnings(c)
	want := []string{
		"environment: LAGBRIDGE_CONFG is not a setting and is ignored (did you mean LAGBRIDGE_CONFIG?)",
		"environment: LAGBRIDGE_TOKEN_FILE is not a setting and is ignored",
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNotSettingsKnown: every LAGBRIDGE_* name the repository's Go code
// and shell scripts read is a setting's variable, LAGBRIDGE_CONFIG, or one
// of notSettings, so that ignoredEnv never warns of a variable lagbridge's
// own tools use. This package's tests (which name wrong ones on purpose)
// aside.
func TestNotSettingsKnown(t *testing.T) {
	keys, _ := envSettings()
	known := map[string]bool{"LAGBRIDGE_CONFIG": true}
	for _, k := range keys {
		known[envName(k)] = true
	}
	for _, n := range notSettings {
		known[n] = true
	}
	goName := regexp.MustCompile(`"(LAGBRIDGE_[A-Z0-9_]*[A-Z0-9])"`)
	shName := regexp.MustCompile(`\$\{?(LAGBRIDGE_[A-Z0-9_]*[A-Z0-9])`)
	root := filepath.Join("..", "..")
	found := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		var re *regexp.Regexp
		switch {
		case strings.HasSuffix(p, ".go") && !(filepath.Dir(p) == filepath.Join(root, "internal", "config") && strings.HasSuffix(p, "_test.go")):
			re = goName
		case strings.HasSuffix(p, ".sh"):
			re = shName
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			found++
			if !known[string(m[1])] {
				t.Errorf("%s reads %s, which is neither a setting nor in notSettings: add it there", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Fatalf("found %d LAGBRIDGE_* names in the repository, want many: is the walk rooted right?", found)
	}
}

// TestClusterListUnnamed: a cluster entry that failed to decode (kafka:
// nope) has no name, and the warnings that list the config's clusters
// say so, where they read "(kafka )" (review-newuser5).
func TestClusterListUnnamed(t *testing.T) {
	c := Config{Kafka: []kafka.Config{{}, {Cluster: "main"}}}
	if got, want := c.clusterList(), "kafka (unnamed), kafka main"; got != want {
		t.Errorf("clusterList() = %q, want %q", got, want)
	}
}

// envWarnings returns c's warnings on the environment's variables.
func envWarnings(c Config) []string {
	var out []string
	for _, w := range c.Warnings() {
		if strings.HasPrefix(w, "environment: ") {
			out = append(out, w)
		}
	}
	return out
}
