package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/consumerclient"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/ttl/kafkaguard"
)

// TestDaemonKafkaGuardSkips, end to end on kfake: a franz-go consumer with
// the consumerclient hook behind ttl/kafkaguard (the reporter its
// Progress) handles 10 live records, then is given 30 records already
// past their deadline and 10 live ones. Its reports carry each
// partition's running count of the records the guard skipped; the daemon
// counts the growth: /v1/lag shows 30 skipped on the target, skipsCounted,
// and /metrics lagbridge_consumer_skipped_total 30. Its first reports
// carried no count (none skipped yet): the first skips are growth, not a
// new member's total (they were lost: 0 counted).
func TestDaemonKafkaGuardSkips(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	topic, group := unique("kskips"), unique("kskips-g")
	createTopic(t, addr, topic, 1, nil)
	prod := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	now := func(int) time.Time { return time.Now() }
	produce(t, prod, topic, 0, 10, now)
	consumeAndCommit(t, addr, group, topic, 10) // the group has offsets the daemon watches
	base := startApp(t, config.Config{Interval: 250 * time.Millisecond, Kafka: []kafka.Config{{Cluster: "main", Brokers: []string{addr},
		Groups: kafka.Filter{Include: []string{group}}}}})

	rep, err := consumerclient.NewKafkaReporter(consumerclient.Config{URL: base, Cluster: "main", Interval: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	g, err := kafkaguard.New(kafkaguard.Config{MaxAge: 2 * time.Second, Progress: rep})
	if err != nil {
		t.Fatal(err)
	}
	cl := client(t, addr, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	ctx, cancel := context.WithCancel(context.Background())
	consumed := make(chan int, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		handled := 0
		for ctx.Err() == nil {
			recs := cl.PollFetches(ctx).Records()
			if _, err := g.Process(ctx, recs, func(context.Context, *kgo.Record) error { handled++; return nil }); err != nil {
				return
			}
			select {
			case <-consumed:
			default:
			}
			consumed <- handled
		}
	}()
	defer func() { cancel(); <-stopped }()
	waitHandled := func(n int) {
		t.Helper()
		poll(t, 20*time.Second, func() (bool, string) {
			select {
			case h := <-consumed:
				if h >= n {
					return true, ""
				}
				return false, fmt.Sprintf("%d handled, want %d", h, n)
			case <-time.After(100 * time.Millisecond):
				return false, fmt.Sprintf("none handled lately, want %d", n)
			}
		})
	}
	produce(t, prod, topic, 0, 10, now)
	waitHandled(10)
	// Reports with no count reach the daemon before the skips.
	poll(t, 20*time.Second, func() (bool, string) {
		tg, ok := targetOf(lagAPI(t, base), "main", topic, group)
		return ok && tg.Lag == 0 && len(tg.Partitions) == 1 && tg.Partitions[0].Reported.Position == 20,
			fmt.Sprintf("found %v: %+v", ok, tg)
	})
	// A count of 0 is no count served: the series and skipsCounted stay
	// away until the first skip.
	if tg, _ := targetOf(lagAPI(t, base), "main", topic, group); tg.SkipsCounted {
		t.Errorf("skipsCounted before any skip: %+v", tg)
	}
	if v, has := metricCounters(t, base, "lagbridge_consumer_skipped_total")["main/"+topic+"/"+group]; has {
		t.Errorf("lagbridge_consumer_skipped_total served before any skip (%v)", v)
	}
	old := time.Now().Add(-time.Minute)
	produce(t, prod, topic, 0, 30, func(int) time.Time { return old })
	produce(t, prod, topic, 0, 10, now)
	waitHandled(20)
	poll(t, 20*time.Second, func() (bool, string) {
		tg, ok := targetOf(lagAPI(t, base), "main", topic, group)
		skipped, has := metricCounters(t, base, "lagbridge_consumer_skipped_total")["main/"+topic+"/"+group]
		return ok && tg.Lag == 0 && tg.Skipped == 30 && tg.SkipsCounted && has && skipped == 30,
			fmt.Sprintf("found %v: lag %d, %d skipped (counted %v; metric %v %v)", ok, tg.Lag, tg.Skipped, tg.SkipsCounted, has, skipped)
	})
	// And no more: the live records handled since count nothing.
	produce(t, prod, topic, 0, 10, now)
	waitHandled(30)
	time.Sleep(time.Second)
	if tg, _ := targetOf(lagAPI(t, base), "main", topic, group); tg.Skipped != 30 {
		t.Fatalf("%d skipped after 10 more live records, want 30", tg.Skipped)
	}
	// The reports stop (the consumer and its reporter close): once they
	// are stale nothing counts the skips, and the series goes away.
	cancel()
	<-stopped
	rep.Close()
	poll(t, 20*time.Second, func() (bool, string) {
		tg, _ := targetOf(lagAPI(t, base), "main", topic, group)
		v, has := metricCounters(t, base, "lagbridge_consumer_skipped_total")["main/"+topic+"/"+group]
		return !tg.SkipsCounted && !has, fmt.Sprintf("skipsCounted %v, metric %v %v after the reports stopped", tg.SkipsCounted, has, v)
	})
}
