// Package kafkatest connects Go tests to the real single-node Apache Kafka
// broker that integration/kafka/kafka.sh runs on 127.0.0.1, and reads consumer
// group lag independently of lagbridge through Kafka's own
// kafka-consumer-groups tool (ConsumerGroupCommand).
//
// Start the broker with `make kafka-up` (integration/kafka/kafka.sh start) and
// export the address it prints:
//
//	export LAGBRIDGE_KAFKA_BOOTSTRAP=127.0.0.1:39092
//
// Without a broker, tests that call Bootstrap are skipped, except in CI
// (CI=true) or with LAGBRIDGE_REQUIRE_KAFKA=1, where they fail.
//
// The package uses the standard library only.
package kafkatest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Environment variables read by this package.
const (
	// EnvBootstrap holds the broker address, e.g. "127.0.0.1:39092".
	EnvBootstrap = "LAGBRIDGE_KAFKA_BOOTSTRAP"
	// EnvRequire, when "1" or "true", turns a missing broker into a failure.
	EnvRequire = "LAGBRIDGE_REQUIRE_KAFKA"
	// EnvScript overrides the path of kafka.sh.
	EnvScript = "LAGBRIDGE_KAFKA_SH"
	// EnvRunDir is kafka.sh's state directory (see kafka.sh); its file
	// "bootstrap" names the running broker.
	EnvRunDir = "LAGBRIDGE_KAFKA_RUN"
	// EnvHome is kafka.sh's cache directory; the state directory defaults to
	// $LAGBRIDGE_KAFKA_HOME/run.
	EnvHome = "LAGBRIDGE_KAFKA_HOME"
)

// ErrGroupNotFound is returned (wrapped) by GroupsDescribe when the broker
// does not know the group.
var ErrGroupNotFound = errors.New("kafkatest: consumer group not found")

// GroupRow is one row of `kafka-consumer-groups --describe --group G`.
type GroupRow struct {
	Group         string
	Topic         string
	Partition     int32
	CurrentOffset int64 // -1 when the tool prints "-" (no committed offset)
	LogEndOffset  int64 // -1 when the tool prints "-"
	Lag           int64 // -1 when the tool prints "-"
	ConsumerID    string
	Host          string
	ClientID      string // "" when the tool prints "-"
}

const startHint = "start one with `make kafka-up` (integration/kafka/kafka.sh start) " +
	"and export " + EnvBootstrap + "=127.0.0.1:PORT as it prints"

// Bootstrap returns the address of the real Kafka broker for tb.
//
// It uses $LAGBRIDGE_KAFKA_BOOTSTRAP when set (failing tb if the address is
// not loopback or does not accept a TCP connection). When it is unset, it
// falls back to the broker that kafka.sh records as running, if that one
// answers. With no broker, tb fails when CI=true or LAGBRIDGE_REQUIRE_KAFKA=1
// (CI must not skip), and is skipped otherwise.
func Bootstrap(tb testing.TB) string {
	tb.Helper()
	if addr := strings.TrimSpace(os.Getenv(EnvBootstrap)); addr != "" {
		if err := checkBootstrap(addr); err != nil {
			tb.Fatalf("kafkatest: %s=%q: %v; %s", EnvBootstrap, addr, err, startHint)
		}
		return addr
	}
	if addr, ok := runningBroker(); ok {
		return addr
	}
	msg := "kafkatest: no real Kafka broker (" + EnvBootstrap + " is unset): " + startHint
	if required(os.Getenv) {
		tb.Fatal(msg + " [required here: CI=true or " + EnvRequire + "=1, so not skipping]")
	}
	tb.Skip(msg)
	return ""
}

// Clusters returns the Kafka clusters a test runs against by name: "kfake"
// (an in-process kfake cluster, closed when tb ends) and "real" (the real
// broker, as [Bootstrap] finds it: skipped or failed as it says). Each
// returns the seed brokers.
func Clusters() map[string]func(tb testing.TB) []string {
	return map[string]func(tb testing.TB) []string{
		"kfake": func(tb testing.TB) []string {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(c.Close)
			return c.ListenAddrs()
		},
		"real": func(tb testing.TB) []string { return []string{Bootstrap(tb)} },
	}
}

// required reports whether a missing broker must fail rather than skip.
func required(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("CI")), "true") {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(getenv(EnvRequire))) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// checkBootstrap validates a comma-separated bootstrap list: loopback hosts
// only, and each must accept a TCP connection.
func checkBootstrap(addrs string) error {
	for _, a := range strings.Split(addrs, ",") {
		a = strings.TrimSpace(a)
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("bad address %q: %v", a, err)
		}
		if !isLoopback(host) {
			return fmt.Errorf("%q is not a loopback address (only 127.0.0.1 / localhost / ::1 are allowed)", a)
		}
		c, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err != nil {
			return fmt.Errorf("cannot connect: %v", err)
		}
		c.Close()
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// runningBroker reads the address kafka.sh recorded for its running broker.
func runningBroker() (string, bool) {
	dir := os.Getenv(EnvRunDir)
	if dir == "" {
		if home := os.Getenv(EnvHome); home != "" {
			dir = filepath.Join(home, "run")
		} else if script, err := scriptPath(); err == nil {
			dir = filepath.Join(filepath.Dir(script), ".cache", "run")
		} else {
			return "", false
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "bootstrap"))
	if err != nil {
		return "", false
	}
	addr := strings.TrimSpace(string(b))
	if addr == "" || checkBootstrap(addr) != nil {
		return "", false
	}
	return addr, true
}

// scriptPath locates integration/kafka/kafka.sh: $LAGBRIDGE_KAFKA_SH, else
// next to this source file, else under the module root from `go env GOMOD`.
func scriptPath() (string, error) {
	if p := os.Getenv(EnvScript); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%q: %v", EnvScript, p, err)
		}
		return p, nil
	}
	var tried []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		p := filepath.Join(filepath.Dir(file), "..", "kafka", "kafka.sh")
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p), nil
		}
		tried = append(tried, p)
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil {
		if gomod := strings.TrimSpace(string(out)); gomod != "" && gomod != os.DevNull {
			p := filepath.Join(filepath.Dir(gomod), "integration", "kafka", "kafka.sh")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			tried = append(tried, p)
		}
	}
	return "", fmt.Errorf("kafkatest: cannot find integration/kafka/kafka.sh (tried %v); set %s", tried, EnvScript)
}

// GroupsDescribe runs
//
//	integration/kafka/kafka.sh groups --bootstrap-server ADDR --describe --group GROUP
//
// against the broker from Bootstrap and parses its table. A group the broker
// does not know gives an error wrapping ErrGroupNotFound; a known group with
// no committed offsets and no members gives no rows and no error.
func GroupsDescribe(tb testing.TB, group string) ([]GroupRow, error) {
	tb.Helper()
	addr := Bootstrap(tb)
	stdout, stderr, err := RunScript(tb, "groups", "--bootstrap-server", addr, "--describe", "--group", group)
	if err != nil {
		return nil, err
	}
	if err := describeStderrError(group, stderr); err != nil {
		return nil, err
	}
	rows, err := ParseGroupsDescribe(stdout)
	if err != nil {
		return nil, fmt.Errorf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	return rows, nil
}

// RunScript runs integration/kafka/kafka.sh with args (bounded to 2 minutes
// and by tb's context) and returns its stdout and stderr. A non-zero exit is
// an error that includes stderr.
func RunScript(tb testing.TB, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	return RunScriptStdin(tb, nil, args...)
}

// RunScriptStdin is RunScript with stdin, e.g. records for `kafka.sh produce`.
func RunScriptStdin(tb testing.TB, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	script, err := scriptPath()
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &o, &e
	cmd.WaitDelay = 5 * time.Second
	if runErr := cmd.Run(); runErr != nil {
		return o.String(), e.String(), fmt.Errorf("kafkatest: %s %s: %v\nstderr:\n%s",
			script, strings.Join(args, " "), runErr, e.String())
	}
	return o.String(), e.String(), nil
}

// describeStderrError turns the failures that ConsumerGroupCommand reports on
// stderr (while still exiting 0) into errors.
func describeStderrError(group, stderr string) error {
	if strings.Contains(stderr, "GroupIdNotFoundException") || strings.Contains(stderr, "does not exist") {
		return fmt.Errorf("%w: %q: %s", ErrGroupNotFound, group, firstLine(stderr, "Error"))
	}
	if strings.Contains(stderr, "Error:") {
		return fmt.Errorf("kafkatest: kafka-consumer-groups --describe --group %q: %s", group, firstLine(stderr, "Error"))
	}
	return nil
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(s)
}

// ParseGroupsDescribe parses the offsets table printed by
// `kafka-consumer-groups --describe` (one or more groups):
//
//	GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID
//
// The GROUP and TOPIC columns are cut at the header's column positions (the
// tool pads them to the longest value, and a group id may hold spaces); the
// remaining columns are whitespace-separated. "-" becomes -1 for the numeric
// columns and "" for the others. Lines outside a table are ignored.
func ParseGroupsDescribe(out string) ([]GroupRow, error) {
	var rows []GroupRow
	inTable := false
	var topicCol, partCol int // rune offsets in the header
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), " \r")
		if strings.TrimSpace(line) == "" {
			inTable = false
			continue
		}
		if h := strings.Fields(line); len(h) >= 6 && h[0] == "GROUP" && h[1] == "TOPIC" && h[2] == "PARTITION" {
			if h[3] != "CURRENT-OFFSET" || h[4] != "LOG-END-OFFSET" || h[5] != "LAG" {
				return nil, fmt.Errorf("kafkatest: line %d: unexpected header %q", n, line)
			}
			runes := []rune(line)
			topicCol = runeIndex(runes, " TOPIC ") + 1
			partCol = runeIndex(runes, " PARTITION") + 1
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		r := []rune(line)
		if len(r) <= partCol {
			return nil, fmt.Errorf("kafkatest: line %d: short row %q", n, line)
		}
		row := GroupRow{
			Group: strings.TrimSpace(string(r[:topicCol])),
			Topic: strings.TrimSpace(string(r[topicCol:partCol])),
		}
		f := strings.Fields(string(r[partCol:]))
		if row.Group == "" || row.Topic == "" || strings.ContainsRune(row.Topic, ' ') || len(f) < 4 {
			return nil, fmt.Errorf("kafkatest: line %d: cannot parse row %q", n, line)
		}
		p, err := strconv.ParseInt(f[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("kafkatest: line %d: partition %q: %v", n, f[0], err)
		}
		row.Partition = int32(p)
		for i, dst := range []*int64{&row.CurrentOffset, &row.LogEndOffset, &row.Lag} {
			if *dst, err = parseOffset(f[1+i]); err != nil {
				return nil, fmt.Errorf("kafkatest: line %d: column %d %q: %v", n, 4+i, f[1+i], err)
			}
		}
		if len(f) >= 5 {
			row.ConsumerID = dash(f[4])
		}
		if len(f) >= 6 {
			row.Host = dash(f[5])
		}
		if len(f) >= 7 {
			row.ClientID = dash(strings.Join(f[6:], " "))
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return rows, nil
}

func runeIndex(r []rune, sub string) int {
	i := strings.Index(string(r), sub)
	if i < 0 {
		return -1
	}
	return utf8.RuneCountInString(string(r)[:i])
}

func parseOffset(s string) (int64, error) {
	if s == "-" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// TotalLag sums Lag over rows, counting "-" (unknown) as 0.
func TotalLag(rows []GroupRow) int64 {
	var t int64
	for _, r := range rows {
		if r.Lag > 0 {
			t += r.Lag
		}
	}
	return t
}
