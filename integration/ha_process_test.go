package integration

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/embedded"
)

// haProcess is one replica run as its own lagbridge process.
type haProcess struct {
	id   string
	base string
	cmd  *exec.Cmd
	logs string // the file of its output
	// exited is closed when the process ended, with err of its Wait.
	exited chan struct{}
	err    error
}

// TestHAProcesses runs three lagbridge processes on one cluster (NATS,
// real Kafka):
// SIGKILL of the leader hands over within the session timeout plus one
// interval; SIGSTOP of the new leader past its session lets a third lead,
// and after SIGCONT the paused one follows and never leads again while
// the third keeps leading in its epoch (fenced by its expired lease).
func TestHAProcesses(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("signals")
	}
	bin := buildLagbridge(t)
	cases := map[string]func(tb testing.TB) string{ // the cluster "c", as YAML
		"nats": func(tb testing.TB) string {
			s := embedded.NATSTest(tb)
			return fmt.Sprintf("nats:\n  - cluster: c\n    urls: [%q]\nquota:\n  natsKV:\n    cluster: c\n", s.ClientURL())
		},
		"kafka": func(tb testing.TB) string {
			return fmt.Sprintf("kafka:\n  - cluster: c\n    brokers: [%q]\n", kafkatest.Bootstrap(tb))
		},
	}
	for name, cluster := range cases {
		t.Run(name, func(t *testing.T) { haProcesses(t, bin, cluster(t)) })
	}
}

// buildLagbridge builds the daemon from ./cmd/lagbridge into a temporary
// directory and returns the binary's path.
func buildLagbridge(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "lagbridge")
	build := exec.Command("go", "build", "-o", bin, "github.com/lagbridge/lagbridge/cmd/lagbridge")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProcess runs bin as replica id with the config yaml (without
// listen: and ha.id:, which it adds), writing its config in dir; its
// output goes to dir/<id>.log (and to stderr with LAGBRIDGE_TEST_LOGS).
// It returns once the process listens, at the address it logged: it
// listens on port 0, as a port picked here and closed before the process
// binds it may be handed out again meanwhile (to a sibling replica, which
// then fails to start while its URL reaches the other one: a replica read
// twice, "two leaders at once"). The process is killed (after SIGCONT)
// when the test ends.
func startProcess(tb testing.TB, bin, dir, id, yaml string) *haProcess {
	tb.Helper()
	cfg := filepath.Join(dir, id+".yaml")
	yaml = "listen: \"127.0.0.1:0\"\n" + strings.Replace(yaml, "ha:\n", "ha:\n  id: "+id+"\n", 1)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	logs, err := os.Create(filepath.Join(dir, id+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { logs.Close() })
	cmd := exec.Command(bin, "run", "--config", cfg)
	dieWithTest(cmd)
	cmd.Stdout, cmd.Stderr = logs, logs
	if os.Getenv("LAGBRIDGE_TEST_LOGS") != "" {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(logs, os.Stderr), io.MultiWriter(logs, os.Stderr)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &haProcess{id: id, cmd: cmd, logs: logs.Name(), exited: make(chan struct{})}
	go func() { // ends when the process does: at the latest at the cleanup's Kill
		p.err = cmd.Wait()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	p.base = "http://" + p.listening(tb, 30*time.Second)
	return p
}

// listenLog finds the address in the daemon's "lagbridge running" line,
// in its JSON or text log format (followed by a quote or a space: all of
// it written).
var listenLog = regexp.MustCompile(`lagbridge running.*listen"?[=:]"?([0-9.]+:[0-9]+)["\s]`)

// listening waits, at most d, for the process to log that it runs and
// returns the address it listens on; it fails the test if the process
// exits first.
func (p *haProcess) listening(tb testing.TB, d time.Duration) string {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		b, _ := os.ReadFile(p.logs)
		if m := listenLog.FindSubmatch(b); m != nil {
			return string(m[1])
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(p.logs)
			tb.Fatalf("replica %s exited before listening (%v):\n%s", p.id, p.err, b)
		case <-time.After(10 * time.Millisecond): // polling its log
		}
		if time.Now().After(deadline) {
			tb.Fatalf("replica %s: not listening after %v", p.id, d)
		}
	}
}

// asReplicas returns ps, but those in except, as replicas to poll.
func asReplicas(ps []*haProcess, except ...*haProcess) []*haReplica {
	var rs []*haReplica
	for _, p := range ps {
		if !slices.Contains(except, p) {
			rs = append(rs, &haReplica{id: p.id, base: p.base, cancel: func() {}})
		}
	}
	return rs
}

func haProcesses(t *testing.T, bin, cluster string) {
	dir := t.TempDir()
	const session, interval = 6 * time.Second, 250 * time.Millisecond
	name := unique("hap")
	var ps []*haProcess
	for i := range 3 {
		ps = append(ps, startProcess(t, bin, dir, fmt.Sprintf("p%d", i), fmt.Sprintf("interval: %s\n%sha:\n  enabled: true\n  name: %s\n  sessionTimeout: %s\n", interval, cluster, name, session)))
	}
	replicas := func(except ...*haProcess) []*haReplica { return asReplicas(ps, except...) }
	byID := map[string]*haProcess{}
	for _, p := range ps {
		byID[p.id] = p
	}
	first := byID[waitOneLeader(t, replicas(), "c", 60*time.Second)]

	// SIGKILL: no release; the others wait out the session.
	killed := time.Now()
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	second := byID[waitOneLeader(t, replicas(first), "c", session+interval+2*time.Second)]
	took := time.Since(killed)
	t.Logf("SIGKILL of leader %s: %s leads after %v (session %v, interval %v)", first.id, second.id, took.Round(time.Millisecond), session, interval)
	if took > session+interval+time.Second {
		t.Errorf("new leader after %v, want within session %v + interval %v (+1s of polling and scheduling)", took, session, interval)
	}

	// SIGSTOP past the session, then SIGCONT: fenced.
	stopped := time.Now()
	if err := second.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	third := byID[waitOneLeader(t, replicas(first, second), "c", session+interval+2*time.Second)]
	t.Logf("SIGSTOP of leader %s: %s leads after %v", second.id, third.id, time.Since(stopped).Round(time.Millisecond))
	followed := leadershipChanges(t, third.base, "c", "follower")
	if err := second.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// From the moment it resumes, the paused one must not lead: poll it
	// (and everyone) for a few intervals.
	resumed := time.Now()
	for time.Since(resumed) < 8*interval {
		ls, all, _ := roles(t, replicas(first), "c")
		if len(ls) != 1 || ls[0] != third.id {
			t.Fatalf("after SIGCONT of %s, leaders %v, want only %s:\n%s", second.id, ls, third.id, all)
		}
		time.Sleep(interval / 2) // sampling the replicas' roles over time
	}
	if got := metricValues(t, second.base, "lagbridge_ha_leader")["c//"]; got != 0 {
		t.Errorf("resumed %s: lagbridge_ha_leader = %v, want 0", second.id, got)
	}
	// The resumed one rejoining may move the epoch (on Kafka a new group
	// generation, which the leader leads on in), never the leadership.
	if got := leadershipChanges(t, third.base, "c", "follower"); got != followed {
		t.Errorf("%s became a follower %v times after the paused one resumed", third.id, got-followed)
	}
}

// leadershipChanges reads lagbridge_ha_leadership_changes_total{cluster,
// role} of the replica at base.
func leadershipChanges(tb testing.TB, base, cluster, role string) float64 {
	tb.Helper()
	for _, m := range metricFamilies(tb, base)["lagbridge_ha_leadership_changes_total"].GetMetric() {
		if l := labelsOf(m); l["cluster"] == cluster && l["role"] == role {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
