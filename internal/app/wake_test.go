package app

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/consumerclient"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// TestLateReportCyclesEarly: a franz-go consumer with the consumerclient
// hook, caught up, then handed records already 1.5 s old (past the
// engage threshold of a 2 s maxAge, 0.4 s): its report wakes the daemon's
// loop, which observes and decides a quarter interval after its last
// readings instead of at the next 4 s interval.
func TestLateReportCyclesEarly(t *testing.T) {
	const (
		interval = 4 * time.Second
		topic    = "orders"
		group    = "billing"
	)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, config.Config{Listen: "127.0.0.1:0", Interval: interval, ShutdownTimeout: 5 * time.Second,
		Kafka: []kafka.Config{{Cluster: "k", Brokers: c.ListenAddrs()}},
		Quota: config.Quota{Policies: []quota.Policy{{Name: "p", MaxAge: 2 * time.Second}}}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	updates, unsub := a.Store.Subscribe()
	defer unsub()

	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(ts time.Time) {
		t.Helper()
		for range 10 {
			if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("x"), Timestamp: ts}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, err := consumerclient.NewKafkaReporter(consumerclient.Config{URL: "http://" + a.Addr(), Cluster: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.WithHooks(rep.Hook()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Caught up: ten fresh records polled and committed, then a poll
	// that waits for more (nothing in hand).
	produce(time.Now())
	for got := 0; got < 10; {
		got += len(cl.PollFetches(ctx).Records())
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	polled := make(chan []*kgo.Record, 1)
	go func() { polled <- cl.PollFetches(ctx).Records() }()

	tg := lag.Target{Kind: lag.KindKafka, Cluster: "k", Topic: topic, Group: group}
	state := func() (lag.State, time.Time, bool) {
		for _, s := range a.Store.States() {
			if s.Target == tg {
				return s, a.Store.Clusters()[0].LastCycle, true
			}
		}
		return lag.State{}, time.Time{}, false
	}
	next := func(what string, ok func(lag.State) bool) (lag.State, time.Time) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case <-updates:
				if s, at, found := state(); found && ok(s) {
					return s, at
				}
			case <-deadline:
				s, _, _ := state()
				t.Fatalf("no cycle showed %s: %+v", what, s)
			}
		}
	}
	_, caughtUp := next("the group caught up", func(s lag.State) bool { return s.Lag == 0 && s.Source == lag.SourceConsumer })

	// Ten records 1.5 s old, which the waiting poll hands over and the
	// consumer holds.
	produce(time.Now().Add(-1500 * time.Millisecond))
	if recs := <-polled; len(recs) == 0 {
		t.Fatal("the poll returned nothing")
	}
	late, at := next("the records in hand", func(s lag.State) bool { return s.HeadAge >= time.Second })
	if gap := at.Sub(caughtUp); gap >= interval/2 {
		t.Errorf("the cycle that saw the late records came %v after the one before, want an early one (a quarter interval after, %v), not at the next interval (%v)", gap, interval/4, interval)
	}
	// The series is there from the first cycle (at 0): count the cycles.
	early := counterTotal(t, a, "lagbridge_observe_early_cycles_total")
	if early < 1 {
		t.Errorf("lagbridge_observe_early_cycles_total: %v, want at least one early cycle", early)
	}
	decided := false
	for _, d := range a.Engine.Decisions() {
		decided = decided || (d.Target == tg && !d.At.Before(late.At))
	}
	if !decided {
		t.Errorf("no decision of %v at the early cycle (%v): %+v", tg, late.At, a.Engine.Decisions())
	}
}

// counterTotal is the sum of the app's counter name over all its series.
func counterTotal(t *testing.T, a *App, name string) float64 {
	t.Helper()
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
