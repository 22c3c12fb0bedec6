package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
}

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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
	bin := filepath.Join(t.TempDir(), "lagbridge")
	build := exec.Command("go", "build", "-o", bin, "github.com/lagbridge/lagbridge/cmd/lagbridge")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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

func haProcesses(t *testing.T, bin, cluster string) {
	dir := t.TempDir()
	const session, interval = 6 * time.Second, 250 * time.Millisecond
	name := unique("hap")
	var ps []*haProcess
	for i := range 3 {
		id := fmt.Sprintf("p%d", i)
		port := freePort(t)
		cfg := filepath.Join(dir, id+".yaml")
		yaml := fmt.Sprintf(`listen: "127.0.0.1:%d"
interval: %s
%sha:
  enabled: true
  id: %s
  name: %s
  sessionTimeout: %s
`, port, interval, cluster, id, name, session)
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "run", "--config", cfg)
		if os.Getenv("LAGBRIDGE_TEST_LOGS") != "" {
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &haProcess{id: id, base: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd}
		t.Cleanup(func() {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		})
		ps = append(ps, p)
	}
	replicas := func(except ...*haProcess) []*haReplica {
		var rs []*haReplica
	next:
		for _, p := range ps {
			for _, e := range except {
				if p == e {
					continue next
				}
			}
			rs = append(rs, &haReplica{id: p.id, base: p.base, cancel: func() {}})
		}
		return rs
	}
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
	epoch := metricValues(t, third.base, "lagbridge_ha_epoch")["c//"]
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
	if got := metricValues(t, third.base, "lagbridge_ha_epoch")["c//"]; got != epoch {
		t.Errorf("%s's epoch moved from %v to %v after the paused one resumed", third.id, epoch, got)
	}
}
