package enforce

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/lagbridge/lagbridge/internal/embedded"
	ltestutil "github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// TestRunnerLogsDriftOnce: a stream whose time bounds differ from its
// policy is logged once per check (the enforcer's warning), not twice.
// Before, the runner logged a second line ("ttl: stream drift", with
// dry_run where the first said dryRun) for every check of every stream.
func TestRunnerLogsDriftOnce(t *testing.T) {
	js := embedded.JetStreamTest(t)
	if _, err := js.CreateStream(ctxT(t), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	var logs ltestutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	runOnce(t, quota.Policy{Name: "p", Match: quota.Match{Topic: "S"}, MaxAge: time.Second, HardAge: 5 * time.Second},
		PolicyRule{Policy: "p", NATSStream: true},
		nil, map[string]*StreamEnforcer{"n": NewStreamEnforcer(js, StreamEnforcerConfig{Cluster: "n", Logger: log})}, log,
		lag.State{Target: lag.Target{Kind: lag.KindNATS, Cluster: "n", Topic: "S", Group: "c"}},
		func() bool { return strings.Contains(logs.String(), "stream=S") })
	if n := strings.Count(logs.String(), "stream=S"); n != 1 {
		t.Fatalf("%d lines for one drift, want 1:\n%s", n, &logs)
	}
}

// TestRunnerLogsOffsetMoveOnce: a dry-run offset move of an empty group is
// logged once per partition it would move (the mover's line), not again
// by the runner. Before, every check (every 10 s on Kafka 4.3.1) added a
// "ttl: offset move" line repeating the count.
func TestRunnerLogsOffsetMoveOnce(t *testing.T) {
	c := newCluster(t)
	cl := newClient(t, c)
	now := time.Now()
	seed(t, cl, now)
	commit(t, kadm.NewClient(cl), "g", map[int32]int64{0: 2, 1: 0})
	var logs ltestutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	runOnce(t, quota.Policy{Name: "p", Match: quota.Match{Topic: "t"}, MaxAge: time.Minute, HardAge: 30 * time.Minute},
		PolicyRule{Policy: "p", KafkaOffsetMove: true},
		map[string]*KafkaMover{"k": NewKafkaMover(cl, KafkaMoverConfig{Cluster: "k", Logger: log})}, nil, log,
		lag.State{Target: lag.Target{Kind: lag.KindKafka, Cluster: "k", Topic: "t", Group: "g"}, HeadAge: 2 * time.Hour},
		func() bool { return strings.Contains(logs.String(), "would move") })
	if n := strings.Count(logs.String(), "ttl:"); n != 1 {
		t.Fatalf("%d lines for one partition's dry-run move, want 1:\n%s", n, &logs)
	}
}

// runOnce runs a Runner for policy p and rule over one cycle with st
// until done holds (at most 10 s), then closes it.
func runOnce(t *testing.T, p quota.Policy, rule PolicyRule, movers map[string]*KafkaMover, streams map[string]*StreamEnforcer,
	log *slog.Logger, st lag.State, done func() bool) {
	t.Helper()
	pols, err := quota.NewPolicies([]quota.Policy{p})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(pols, []PolicyRule{rule}, movers, streams, log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Start(ctx)
	defer r.Close()
	r.OnCycle(st.Target.Cluster, time.Now(), []lag.State{st})
	deadline := time.Now().Add(10 * time.Second)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
