package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// member runs a group member that polls until the test ends or stop is
// called (idempotent); commit says whether it commits (franz-go's default
// auto-commit) or never. One that never commits holds its partitions
// without moving their committed offsets: a live consumer that is stuck.
func member(tb testing.TB, addr, group string, commit bool, opts ...kgo.Opt) (stop func()) {
	tb.Helper()
	o := append([]kgo.Opt{kgo.ConsumerGroup(group)}, opts...)
	if !commit {
		o = append(o, kgo.DisableAutoCommit())
	}
	cl := client(tb, addr, o...)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait(); cl.LeaveGroup() }) }
	tb.Cleanup(stop)
	return stop
}

// stableGroup waits (10 s at most) until group is Stable with a member.
func stableGroup(tb testing.TB, addr, group string) {
	tb.Helper()
	adm := kadm.NewClient(client(tb, addr))
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		dg, err := adm.DescribeGroups(ctx, group)
		cancel()
		if err == nil && dg[group].State == "Stable" && len(dg[group].Members) > 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("group %s never Stable with a member: %v %+v", group, err, dg[group])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// steadyProducer writes n records every 10 ms, stamped now, until the test
// ends.
func steadyProducer(tb testing.TB, addr, topic string, n int) {
	tb.Helper()
	cl := client(tb, addr)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: topic, Value: []byte("x")}
			}
			_ = cl.ProduceSync(ctx, recs...) // fails only when ctx ends
		}
	})
	tb.Cleanup(func() { cancel(); wg.Wait() })
}

// TestRealKafkaAbandonedGroup: a group keeps its offsets on topic A while
// its only member consumes topic B, and a second group has offsets on A
// and no member at all. Neither was live on A since the daemon started:
// from their first readings, well inside the default rules.abandonAfter
// (2m), (A, group) and (A, dead) are abandoned in /v1/lag and their first
// decisions bind no producer (rule abandoned, unlimited), while (B,
// group) is live.
func TestRealKafkaAbandonedGroup(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topicA, topicB, group, dead := unique("left"), unique("moved-to"), unique("mover"), unique("dead")
	createTopic(t, addr, topicA, 1, nil)
	createTopic(t, addr, topicB, 1, nil)
	prod := client(t, addr)
	produce(t, prod, topicA, 0, 30, func(int) time.Time { return time.Now().Add(-time.Minute) })
	consumeAndCommit(t, addr, group, topicA, 10) // 20 left on A, then it leaves
	consumeAndCommit(t, addr, dead, topicA, 5)   // 25 left on A, and gone for good
	member(t, addr, group, true, kgo.ConsumeTopics(topicB))
	// The daemon's first sight must not fall in the member's join: a group
	// read mid-rebalance is live unknown, which binds like live (the safe
	// side), so it is abandoned only AbandonAfter later, not at once.
	stableGroup(t, addr, group)

	base := startApp(t, config.Config{
		Kafka: []kafka.Config{{Cluster: "real", Brokers: []string{addr}, Groups: kafka.Filter{Include: []string{group, dead}}}},
		Quota: config.Quota{Policies: []quota.Policy{{Name: "left", MaxAge: time.Second, Match: quota.Match{Topic: topicA}}}},
	})
	for _, g := range []string{group, dead} {
		wantAbandonedAtOnce(t, base, "real", topicA, g)
	}
	poll(t, 60*time.Second, func() (bool, string) {
		r := lagAPI(t, base)
		a, okA := targetOf(r, "real", topicA, group)
		b, okB := targetOf(r, "real", topicB, group)
		d, okD := decisionOf(t, base, "real", topicA, group)
		return okA && okB && okD && a.Status == lag.StatusAbandoned && a.Live == lag.LiveNo && a.Lag == 20 &&
				b.Live == lag.LiveYes && b.Status != lag.StatusAbandoned && d.Rule == quota.RuleAbandoned && d.IsUnlimited(),
			fmt.Sprintf("A: %v %s (%s) live %s lag %d; B: %v %s live %s; decision %v %s unlimited %v",
				okA, a.Status, a.Reason, a.Live, a.Lag, okB, b.Status, b.Live, okD, d.Rule, d.IsUnlimited())
	})
	if st := statusMetric(t, base, "real/"+topicA+"/"+group); st["abandoned"] != 1 {
		t.Fatalf("lagbridge_target_status of %s: %v", topicA, st)
	}
}

// TestRealKafkaNoCommitLiveGroup: a group whose member consumes from the
// end and never commits, on a topic written 1,000 records/s. It is
// measured from when it was first seen: its lag and head age grow from
// there (never lag 0), and its producers are throttled as for any
// consumer.
func TestRealKafkaNoCommitLiveGroup(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, group := unique("fresh"), unique("nocommit")
	createTopic(t, addr, topic, 1, nil)
	member(t, addr, group, false, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	steadyProducer(t, addr, topic, 10)

	base := startApp(t, config.Config{
		Kafka: []kafka.Config{{Cluster: "real", Brokers: []string{addr}, Groups: kafka.Filter{Include: []string{group}}}},
		Quota: config.Quota{Policies: []quota.Policy{{Name: "fresh", MaxAge: time.Second, Match: quota.Match{Topic: topic}}}},
	})
	var first struct {
		lag int64
		age float64
	}
	poll(t, 60*time.Second, func() (bool, string) {
		tg, ok := targetOf(lagAPI(t, base), "real", topic, group)
		first.lag, first.age = tg.Lag, tg.HeadAgeSeconds
		return ok && tg.Source == lag.SourceFirstSight && tg.Live == lag.LiveYes && tg.Lag > 0 && tg.UncommittedPartitions == 0,
			fmt.Sprintf("found %v source %q live %s lag %d uncommitted %d committed lag %d", ok, tg.Source, tg.Live, tg.Lag, tg.UncommittedPartitions, tg.CommittedLag)
	})
	poll(t, 30*time.Second, func() (bool, string) {
		tg, _ := targetOf(lagAPI(t, base), "real", topic, group)
		d, ok := decisionOf(t, base, "real", topic, group)
		return tg.Lag >= first.lag+1000 && tg.HeadAgeSeconds >= first.age+1 && ok && !d.IsUnlimited() && d.Rule != quota.RuleAbandoned,
			fmt.Sprintf("lag %d (first %d) head age %.1fs (first %.1fs) status %s; decision %s unlimited %v (%s)",
				tg.Lag, first.lag, tg.HeadAgeSeconds, first.age, tg.Status, d.Rule, d.IsUnlimited(), d.Reason)
	})
}
