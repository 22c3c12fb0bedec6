package integration

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/consumerclient"
	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/lag"
)

// TestConsumerReportsRealKafka: a franz-go consumer with the default 5s
// auto-commit and the consumerclient hook, against the real broker and the
// whole daemon: within a report period /v1/lag measures from the position
// the consumer has in hand (source "consumer", head age the age of the
// record it processes), and falls back to commits when reports stop.
func TestConsumerReportsRealKafka(t *testing.T) {
	consumerReportScenario(t, kafkatest.Bootstrap(t))
}

// TestConsumerReportsKfake: the same on kfake.
func TestConsumerReportsKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	consumerReportScenario(t, c.ListenAddrs()[0])
}

func consumerReportScenario(t *testing.T, addr string) {
	topic, group := unique("reports"), unique("reports-g")
	createTopic(t, addr, topic, 1, nil)
	prod := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// Ten records a minute old, consumed and committed by an earlier
	// member: the group has offsets the daemon watches.
	old := time.Now().Add(-time.Minute)
	produce(t, prod, topic, 0, 10, func(int) time.Time { return old })
	consumeAndCommit(t, addr, group, topic, 10)
	base := startApp(t, config.Config{Kafka: []kafka.Config{{Cluster: "main", Brokers: []string{addr},
		Groups: kafka.Filter{Include: []string{group}}}}})

	// Ten more, three seconds old, which the consumer polls and holds.
	head := time.Now().Add(-3 * time.Second).Truncate(time.Millisecond)
	produce(t, prod, topic, 0, 10, func(i int) time.Time { return head.Add(time.Duration(i) * time.Millisecond) })
	rep, err := consumerclient.NewKafkaReporter(consumerclient.Config{URL: base, Cluster: "main"})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	cl := client(t, addr, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	ctx := ctxT(t, 60*time.Second)
	var inHand []*kgo.Record
	for got := 0; got < 10; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("polled %d of 10: %v", got, ctx.Err())
		}
		if recs := fs.Records(); len(recs) > 0 {
			inHand, got = recs, got+len(recs)
		}
	}
	polled := time.Now()
	first := inHand[0]
	target := func(r daemon.LagResponse) (daemon.TargetView, daemon.PartitionView, bool) {
		for _, tg := range r.Targets {
			if tg.Topic == topic && tg.Group == group && len(tg.Partitions) == 1 {
				return tg, tg.Partitions[0], true
			}
		}
		return daemon.TargetView{}, daemon.PartitionView{}, false
	}
	// In hand: lag counts from the first record in hand, and the head age
	// is that record's age, as the consumer knows it.
	poll(t, 20*time.Second, func() (bool, string) {
		r := lagAPI(t, base)
		tg, p, ok := target(r)
		age := r.GeneratedAt.Sub(first.Timestamp).Seconds()
		return ok && p.Reported.Position == first.Offset && p.Reported.HeadTime.Equal(first.Timestamp) &&
				tg.Source == lag.SourceConsumer && tg.Lag == 20-first.Offset && math.Abs(tg.HeadAgeSeconds-age) < 1,
			fmt.Sprintf("%s lag %d head age %.2fs (the record in hand: %.2fs old); partition 0: %+v, want reported position %d head %v",
				tg.Source, tg.Lag, tg.HeadAgeSeconds, age, p, first.Offset, first.Timestamp)
	})
	{
		r := lagAPI(t, base)
		tg, p, _ := target(r)
		t.Logf("in hand: source %s, lag %d, head age %.2fs (record in hand %.2fs old); committed lag %d, committed head age %.2fs; reported %+v",
			tg.Source, tg.Lag, tg.HeadAgeSeconds, r.GeneratedAt.Sub(first.Timestamp).Seconds(), tg.CommittedLag, tg.CommittedHeadAgeSeconds, p.Reported)
	}
	// The hook reports every 250ms and the daemon observes every 250ms.
	if seen := time.Since(polled); seen > 2*time.Second {
		t.Errorf("/v1/lag showed the consumer's position %v after the poll", seen)
	}
	if v := metricValues(t, base, "lagbridge_consumer_report_age_seconds"); len(v) != 1 {
		t.Errorf("lagbridge_consumer_report_age_seconds: %v, want one target", v)
	}

	// The consumer asks for more: partition 0 is idle at its end, 20.
	pollCtx, stopPoll := context.WithCancel(context.Background())
	polling := make(chan struct{})
	go func() { defer close(polling); cl.PollFetches(pollCtx) }()
	defer func() { stopPoll(); <-polling }()
	poll(t, 20*time.Second, func() (bool, string) {
		tg, p, ok := target(lagAPI(t, base))
		return ok && p.Reported.Position == 20 && p.Reported.HeadTime.IsZero() && tg.Source == lag.SourceConsumer && tg.Lag == 0,
			fmt.Sprintf("%s lag %d (committed lag %d); partition 0: %+v", tg.Source, tg.Lag, tg.CommittedLag, p)
	})

	// Reports stop: /v1/lag falls back to commits within the 3s freshness.
	rep.Close()
	poll(t, 20*time.Second, func() (bool, string) {
		tg, p, ok := target(lagAPI(t, base))
		return ok && p.Reported.IsZero() && tg.Source != lag.SourceConsumer, fmt.Sprintf("%s; partition 0: %+v", tg.Source, p)
	})
}
