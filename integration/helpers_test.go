package integration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/lag"
)

var seq atomic.Int64

// unique returns a name no other test (or earlier run on the same broker)
// uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, seq.Add(1))
}

func ctxT(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

func client(tb testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

func createTopic(tb testing.TB, addr, topic string, partitions int32, configs map[string]*string) {
	tb.Helper()
	adm := kadm.NewClient(client(tb, addr))
	ctx := ctxT(tb, 30*time.Second)
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err != nil || resp.Err != nil {
		tb.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
	// Wait until the broker's metadata shows a leader for every partition:
	// a produce right after CreateTopics can read UNKNOWN_TOPIC_OR_PARTITION
	// past franz-go's few retries on a busy machine (CI at 134fbc7:
	// TestRealKafkaAbandonedGroup's first produce, 1.25 s after the start).
	for {
		ts, err := adm.ListTopics(ctx, topic)
		if d, ok := ts[topic]; err == nil && ok && d.Err == nil && int32(len(d.Partitions)) == partitions && leadersElected(d) {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("create topic %s: no leader for every partition within 30s: %v", topic, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leadersElected reports whether every partition of d has a leader.
func leadersElected(d kadm.TopicDetail) bool {
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// produce writes n records to partition p with timestamps ts(i).
func produce(tb testing.TB, cl *kgo.Client, topic string, p int32, n int, ts func(i int) time.Time) {
	tb.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprintf("v%d", i)), Timestamp: ts(i)}
	}
	if err := cl.ProduceSync(ctxT(tb, 30*time.Second), recs...).FirstErr(); err != nil {
		tb.Fatalf("produce: %v", err)
	}
}

// consumeAndCommit joins group, consumes exactly n records (across all
// partitions), commits them and leaves; opts can pick the group protocol.
func consumeAndCommit(tb testing.TB, addr, group, topic string, n int, opts ...kgo.Opt) {
	tb.Helper()
	o := append([]kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted())}, opts...)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, o...)...)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close() // leaves the group
	ctx := ctxT(tb, 60*time.Second)
	got := 0
	for got < n {
		fs := cl.PollRecords(ctx, n-got)
		if err := ctx.Err(); err != nil {
			tb.Fatalf("consumed %d of %d: %v", got, n, err)
		}
		for _, e := range fs.Errors() {
			tb.Logf("fetch error (retried): %v", e.Err)
		}
		recs := fs.Records()
		got += len(recs)
		if err := cl.CommitRecords(ctx, recs...); err != nil {
			tb.Fatalf("commit: %v", err)
		}
	}
}

// observer returns an observer of one group on the real broker.
func observer(tb testing.TB, addr, group string) *kafka.Observer {
	tb.Helper()
	o, err := kafka.New(kafka.Config{Cluster: "real", Brokers: []string{addr}, Groups: kafka.Filter{Include: []string{group}}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(o.Close)
	return o
}

// observeUntil polls Observe until cond holds for the sample of (topic,
// group) or the deadline passes; it returns the last sample.
func observeUntil(tb testing.TB, o *kafka.Observer, topic, group string, cond func(lag.Sample) bool) lag.Sample {
	tb.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var last lag.Sample
	var lastErr error
	for time.Now().Before(deadline) {
		samples, err := o.Observe(ctxT(tb, 15*time.Second))
		lastErr = err
		for _, s := range samples {
			if s.Target.Topic == topic && s.Target.Group == group {
				last = s
				if cond(s) {
					return s
				}
			}
		}
		time.Sleep(200 * time.Millisecond) // polling a real broker, not waiting for a result
	}
	tb.Fatalf("condition never held for %s/%s; last sample %s (err %v)", topic, group, dump(last), lastErr)
	return last
}

func totalLag(s lag.Sample) (n int64) {
	for _, p := range s.Partitions {
		n += p.Lag
	}
	return n
}

func dump(s lag.Sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s state=%s members=%d err=%q", s.Target, s.GroupState, s.Members, s.Err)
	for _, p := range s.Partitions {
		fmt.Fprintf(&b, "\n  p%d start=%d end=%d committed=%d lag=%d head=%v known=%v stale=%v err=%q",
			p.Partition, p.LogStart, p.End, p.Committed, p.Lag, p.HeadTime.Format(time.RFC3339Nano), p.HeadKnown, p.Stale, p.Err)
	}
	return b.String()
}

// kfakeAddr starts a one-broker kfake cluster for the test and returns
// its address.
func kfakeAddr(tb testing.TB) string {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}
