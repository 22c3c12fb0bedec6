package integration

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

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
	consumerReportScenario(t, kfakeAddr(t))
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

// TestConsumerHandoffRealKafka: a goroutine-per-partition consumer (the
// poll loop hands each partition's records to its worker and polls on)
// whose partition 0 worker is stuck, against the real broker and the
// whole daemon. With the hook's KeepUntilFinished and a Done per record,
// /v1/lag shows partition 0 at its first unfinished record, with that
// record's age and the queue behind it; the default mode reads the queue
// as consumed (lag 0), which is why it must be left out of such a
// consumer.
func TestConsumerHandoffRealKafka(t *testing.T) {
	handoffScenario(t, kafkatest.Bootstrap(t))
}

// TestConsumerHandoffKfake: the same on kfake.
func TestConsumerHandoffKfake(t *testing.T) {
	handoffScenario(t, kfakeAddr(t))
}

func handoffScenario(t *testing.T, addr string) {
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) { handoffRun(t, addr, keep) })
	}
}

func handoffRun(t *testing.T, addr string, keep bool) {
	topic, group := unique("handoff"), unique("handoff-g")
	createTopic(t, addr, topic, 2, nil)
	prod := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// Ten records a partition, consumed and committed by an earlier
	// member: the group has offsets the daemon watches.
	old := time.Now().Add(-time.Minute)
	for p := range int32(2) {
		produce(t, prod, topic, p, 10, func(int) time.Time { return old })
	}
	consumeAndCommit(t, addr, group, topic, 20)
	base := startApp(t, config.Config{Kafka: []kafka.Config{{Cluster: "main", Brokers: []string{addr},
		Groups: kafka.Filter{Include: []string{group}}}}})

	// Twenty more a partition, three seconds old. Partition 0's worker
	// finishes five (offsets 10-14) and is stuck on offset 15 with 14
	// queued behind it (15 unfinished); partition 1's finishes its twenty.
	head := time.Now().Add(-3 * time.Second).Truncate(time.Millisecond)
	stamp := func(i int) time.Time { return head.Add(time.Duration(i) * time.Millisecond) }
	for p := range int32(2) {
		produce(t, prod, topic, p, 20, stamp)
	}
	stuck := stamp(5) // offset 15's timestamp
	rep, err := consumerclient.NewKafkaReporter(consumerclient.Config{URL: base, Cluster: "main", KeepUntilFinished: keep})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	cl := client(t, addr, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	w := startWorkers(t, cl, rep.Done, func(r *kgo.Record) bool { return r.Partition == 0 && r.Offset >= 15 })
	w.waitHandled(t, 25)

	target := func(r daemon.LagResponse) (tg daemon.TargetView, p0 daemon.PartitionView, ok bool) {
		for _, tg := range r.Targets {
			if tg.Topic == topic && tg.Group == group && len(tg.Partitions) == 2 {
				return tg, tg.Partitions[0], true
			}
		}
		return tg, p0, false
	}
	if !keep {
		// The default mode: the poll loop polled on, so the hook reports
		// the 15 unfinished records finished, and the daemon trusts it over
		// the commits.
		poll(t, 20*time.Second, func() (bool, string) {
			tg, p, ok := target(lagAPI(t, base))
			return ok && tg.Source == lag.SourceConsumer && p.Reported.Position == 30 && tg.Lag == 0,
				fmt.Sprintf("%s lag %d; partition 0: %+v", tg.Source, tg.Lag, p)
		})
		tg, p, _ := target(lagAPI(t, base))
		t.Logf("default mode, 15 records unfinished (a stuck worker, 14 queued behind it): lag %d, head age %.2fs, partition 0 reported %+v (committed lag %d)",
			tg.Lag, tg.HeadAgeSeconds, p.Reported, tg.CommittedLag)
		return
	}
	// Partition 0 at its first unfinished record (finished in order: the
	// count finished is that offset), with its age and the 15 unfinished
	// records; partition 1 idle at its end.
	poll(t, 20*time.Second, func() (bool, string) {
		r := lagAPI(t, base)
		tg, p, ok := target(r)
		age := r.GeneratedAt.Sub(stuck).Seconds()
		return ok && tg.Source == lag.SourceConsumer && p.Reported.Position == 15 && p.Reported.HeadTime.Equal(stuck) &&
				p.Reported.Held == 15 && tg.Lag == 15 && math.Abs(tg.HeadAgeSeconds-age) < 1,
			fmt.Sprintf("%s lag %d head age %.2fs (offset 15: %.2fs old); partition 0: %+v", tg.Source, tg.Lag, tg.HeadAgeSeconds, age, p.Reported)
	})
	tg, p, _ := target(lagAPI(t, base))
	t.Logf("kept until finished: lag %d, head age %.2fs, partition 0 reported %+v (committed lag %d)", tg.Lag, tg.HeadAgeSeconds, p.Reported, tg.CommittedLag)

	// The worker gets going again: partition 0 idle at its end.
	w.release()
	poll(t, 20*time.Second, func() (bool, string) {
		tg, p, ok := target(lagAPI(t, base))
		return ok && tg.Source == lag.SourceConsumer && p.Reported.Position == 30 && p.Reported.HeadTime.IsZero() && tg.Lag == 0,
			fmt.Sprintf("%s lag %d; partition 0: %+v", tg.Source, tg.Lag, p.Reported)
	})
}

// workers is franz-go's goroutine-per-partition consumer: a poll loop
// that hands each partition's records to that partition's worker and
// polls on at once, and one worker a partition that handles its records
// in order and calls finish after each. A worker waits before each
// record stuck says so, until release. The goroutines stop when the test
// ends.
type workers struct {
	finish func(*kgo.Record)
	stuck  func(*kgo.Record) bool
	gate   chan struct{}

	mu      sync.Mutex
	queues  map[int32]chan *kgo.Record
	handled int
	wg      sync.WaitGroup
}

func startWorkers(tb testing.TB, cl *kgo.Client, finish func(*kgo.Record), stuck func(*kgo.Record) bool) *workers {
	w := &workers{finish: finish, stuck: stuck, gate: make(chan struct{}), queues: map[int32]chan *kgo.Record{}}
	ctx, cancel := context.WithCancel(context.Background())
	w.wg.Go(func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachPartition(func(p kgo.FetchTopicPartition) {
				q := w.queue(ctx, p.Partition)
				for _, r := range p.Records {
					q <- r // room for every record of these tests: never blocks
				}
			})
		}
	})
	tb.Cleanup(func() { cancel(); w.wg.Wait() })
	return w
}

// queue returns partition p's worker queue, starting its worker.
func (w *workers) queue(ctx context.Context, p int32) chan *kgo.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.queues[p]; q != nil {
		return q
	}
	q := make(chan *kgo.Record, 1000)
	w.queues[p] = q
	w.wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-q:
				if w.stuck(r) {
					select {
					case <-w.gate:
					case <-ctx.Done():
						return
					}
				}
				w.finish(r)
				w.mu.Lock()
				w.handled++
				w.mu.Unlock()
			}
		}
	})
	return q
}

// release lets every stuck worker go on.
func (w *workers) release() { close(w.gate) }

// waitHandled waits until the workers handled n records.
func (w *workers) waitHandled(tb testing.TB, n int) {
	tb.Helper()
	poll(tb, 30*time.Second, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.handled >= n, fmt.Sprintf("%d of %d records handled", w.handled, n)
	})
}
