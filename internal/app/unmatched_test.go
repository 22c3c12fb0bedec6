package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// TestWarnsPolicyWithoutTarget: a policy naming a topic that does not
// exist is named in a warning once the cluster was observed, and a policy
// that has its target is not; before, neither said anything.
func TestWarnsPolicyWithoutTarget(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var offs kadm.Offsets
	offs.AddOffset("orders", 0, 1, -1)
	if _, err := kadm.NewClient(cl).CommitOffsets(ctx, "billing", offs); err != nil {
		t.Fatal(err)
	}

	cfg := config.Config{Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Log: config.Log{Level: "info", Format: "text"}, Kafka: []kafka.Config{{Cluster: "k", Brokers: c.ListenAddrs()}}}
	cfg.Quota.Policies = []quota.Policy{
		{Name: "real", Match: quota.Match{Topic: "orders"}, MaxAge: 2 * time.Second},
		{Name: "ghost", Match: quota.Match{Topic: "orderz"}, MaxAge: 2 * time.Second},
	}
	var logs testutil.Buffer
	a, err := New(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { stop(); <-done }()

	for !strings.Contains(logs.String(), "quota policy applies to no target") {
		if ctx.Err() != nil {
			t.Fatalf("no warning about policy ghost; logs:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a few more cycles: said once
	var warned []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "quota policy applies to no target") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "policy=ghost") {
		t.Fatalf("want one warning, for ghost only; got:\n%s", strings.Join(warned, "\n"))
	}
}

// TestUnmatchedWaitsForEveryCluster: the cycles a policy's warning waits
// for are counted per cluster, so that a fast cluster's cycles do not speak
// for a slow one whose target (here a consumer group created just after
// the start) appears at its second cycle; before, three cycles of any
// clusters warned about it.
func TestUnmatchedWaitsForEveryCluster(t *testing.T) {
	store := daemon.NewStore(map[string]lag.Kind{"fast": lag.KindKafka, "slow": lag.KindKafka})
	u, logs := topicPolicies(t, store, "orders", "events")
	state := func(cluster, topic string) lag.State {
		return lag.State{Target: lag.Target{Kind: lag.KindKafka, Cluster: cluster, Topic: topic, Group: "g"}}
	}
	update := func(cluster string, states ...lag.State) {
		store.Update(daemon.ClusterStatus{Name: cluster, Kind: lag.KindKafka, Observed: true}, states)
		u.cycle(cluster, 2)
	}
	update("slow") // no group on its topic yet
	for range unmatchedCycles + 1 {
		update("fast", state("fast", "orders"))
	}
	update("slow", state("slow", "events"))
	for range unmatchedCycles {
		update("fast", state("fast", "orders"))
		update("slow", state("slow", "events"))
	}
	if strings.Contains(logs.String(), "applies to no target") {
		t.Fatalf("warned before the slow cluster's cycles were in:\n%s", logs.String())
	}
}

// TestUnmatchedPolicyAppliesLater: a policy warned about because its
// consumer group started after the daemon (the order a new user starts
// things in) is named again, once, at info, when it matches a target,
// with that target; before, the warning that it "limits no producer"
// stood alone in the log while it limited them.
func TestUnmatchedPolicyAppliesLater(t *testing.T) {
	store := daemon.NewStore(map[string]lag.Kind{"k": lag.KindKafka})
	u, logs := topicPolicies(t, store, "orders", "orderz")
	update := func(states ...lag.State) {
		store.Update(daemon.ClusterStatus{Name: "k", Kind: lag.KindKafka, Observed: true}, states)
		u.cycle("k", 1)
	}
	for range unmatchedCycles {
		update() // no group reads the topic yet
	}
	if n := strings.Count(logs.String(), "applies to no target"); n != 2 {
		t.Fatalf("%d warnings, want one for each policy:\n%s", n, logs.String())
	}
	orders := lag.State{Target: lag.Target{Kind: lag.KindKafka, Cluster: "k", Topic: "orders", Group: "billing"}}
	for range 3 * recheckCycles {
		update(orders)
	}
	var now []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "applies to a target now") {
			now = append(now, line)
		}
	}
	if len(now) != 1 || !strings.Contains(now[0], "policy=orders") || !strings.Contains(now[0], "group=billing") ||
		!strings.Contains(now[0], "level=INFO") {
		t.Fatalf("want one info line for orders with its target; got:\n%s", strings.Join(now, "\n"))
	}
	if u.done {
		t.Error("done while orderz still matches nothing")
	}
}

// topicPolicies returns an unmatched for store watching one policy per
// topic, each named after its topic, and the buffer it logs to.
func topicPolicies(tb testing.TB, store *daemon.Store, topics ...string) (*unmatched, *testutil.Buffer) {
	tb.Helper()
	var specs []quota.Policy
	for _, tp := range topics {
		specs = append(specs, quota.Policy{Name: tp, Match: quota.Match{Topic: tp}, MaxAge: 2 * time.Second})
	}
	pols, err := quota.NewPolicies(specs)
	if err != nil {
		tb.Fatal(err)
	}
	logs := &testutil.Buffer{}
	return newUnmatched(pols, specs, store, slog.New(slog.NewTextHandler(logs, nil))), logs
}
