package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("interval: 1ms\nkafka: [{brokers: [nohost]}]\nnats: [{cluster: x, urls: []}]\nlistn: x\n"), 0o600)
	code, _, stderr := runCLI("check", "--config", bad)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	// Every mistake is named, each on its own line.
	for _, want := range []string{"interval:", "kafka[0].cluster:", "kafka[0].brokers[0]:", "nats[0].urls:", "listn: unknown key"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("missing %q in:\n%s", want, stderr)
		}
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("kafka: [{cluster: main, brokers: ['127.0.0.1:9092']}]\n"), 0o600)
	if code, out, stderr := runCLI("check", "--config", good); code != 0 || !strings.Contains(out, "config ok") {
		t.Fatalf("good config: %d %s %s", code, out, stderr)
	}
}

func TestCommands(t *testing.T) {
	cases := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"version"}, 0, "lagbridge"},
		{[]string{"help"}, 0, "Usage"},
		{nil, 2, ""},
		{[]string{"frobnicate"}, 2, ""},
		{[]string{"run", "--no-such-flag"}, 2, ""},
		{[]string{"check", "extra-arg"}, 2, ""},
	}
	for _, c := range cases {
		if code, out, _ := runCLI(c.args...); code != c.code || !strings.Contains(out, c.out) {
			t.Errorf("%v: exit %d out %q, want %d containing %q", c.args, code, out, c.code, c.out)
		}
	}
}

// TestDemoSmoke: the README's first command works and prints the table for
// both brokers, then stops by itself.
func TestDemoSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	code, out, stderr := runCLI("demo", "--duration", "4s", "--listen", "127.0.0.1:0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"demo-kafka/orders", "demo-nats/EVENTS", "dashboard: http://127.0.0.1:", "lagbridge demo report", "checkout", "batch-export"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
