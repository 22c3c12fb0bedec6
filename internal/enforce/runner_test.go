package enforce

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	pols, err := quota.NewPolicies([]quota.Policy{{Name: "p", Match: quota.Match{Topic: "S"}, MaxAge: time.Second, HardAge: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(pols, []PolicyRule{{Policy: "p", NATSStream: true}},
		nil, map[string]*StreamEnforcer{"n": NewStreamEnforcer(js, StreamEnforcerConfig{Cluster: "n", Logger: log})}, log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Start(ctx)
	defer r.Close()
	r.OnCycle("n", time.Now(), []lag.State{{Target: lag.Target{Kind: lag.KindNATS, Cluster: "n", Topic: "S", Group: "c"}}})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "stream=S") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r.Close()
	if n := strings.Count(logs.String(), "stream=S"); n != 1 {
		t.Fatalf("%d lines for one drift, want 1:\n%s", n, &logs)
	}
}
