package replica

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/leader"
)

// TestKafkaChannelTopicConfigs: the lease state topic is created compacted
// and rolls its segments, so that a replica starting later reads the
// compacted state, not every rewrite since the broker's default segment
// (7 days) began.
func TestKafkaChannelTopicConfigs(t *testing.T) {
	for name, seeds := range kafkatest.Clusters() {
		t.Run(name, func(t *testing.T) {
			opts := []kgo.Opt{kgo.SeedBrokers(seeds(t)...)}
			topic := fmt.Sprintf("lagbridge-test-%d.leases", time.Now().UnixNano())
			ch := NewKafka(opts, topic)
			defer ch.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := ch.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			defer func() { _, _ = adm.DeleteTopics(context.Background(), topic) }()
			rc, err := adm.DescribeTopicConfigs(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			c, err := rc.On(topic, nil)
			if err != nil || c.Err != nil {
				t.Fatalf("describe %s: %v %v", topic, err, c.Err)
			}
			got := map[string]string{}
			for _, e := range c.Configs {
				got[e.Key] = e.MaybeValue()
			}
			for k, want := range map[string]string{"cleanup.policy": "compact", "segment.ms": "600000"} {
				if got[k] != want {
					t.Errorf("%s = %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

// TestKafkaChannelFenced: on the lease state topic, the broker refuses a
// deposed leader's writes once a leader of a higher epoch wrote: the
// write it had started before it paused (produced, not yet committed when
// the next leader wrote) and one it sends after (the lease check behind
// it passed on a clock that lied: WithEpoch has no deadline). A reader
// (read_committed) sees the new leader's set, never the deposed one's,
// and the deposed one's reports (no epoch) still land.
func TestKafkaChannelFenced(t *testing.T) {
	for name, seeds := range kafkatest.Clusters() {
		t.Run(name, func(t *testing.T) {
			opts := []kgo.Opt{kgo.SeedBrokers(seeds(t)...)}
			topic := fmt.Sprintf("lagbridge-fenced-%d.leases", time.Now().UnixNano())
			old, next := NewKafka(opts, topic).(*kafkaChannel), NewKafka(opts, topic).(*kafkaChannel)
			defer old.Close()
			defer next.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			defer func() {
				if cl, err := kgo.NewClient(opts...); err == nil {
					_, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topic)
					cl.Close()
				}
			}()
			set := key(kindSet, "p")
			if err := old.Put(leader.WithEpoch(ctx, 4), set, []byte("a")); err != nil {
				t.Fatalf("the leader of epoch 4 writes: %v", err)
			}
			// The leader of epoch 4 pauses between its produce and its
			// commit; meanwhile the leader of epoch 7 writes.
			old.beforeCommit = func() {
				old.beforeCommit = nil
				if err := next.Put(leader.WithEpoch(ctx, 7), set, []byte("b")); err != nil {
					t.Errorf("the leader of epoch 7 writes: %v", err)
				}
			}
			if err := old.Put(leader.WithEpoch(ctx, 4), set, []byte("paused")); !errors.Is(err, leader.ErrFenced) {
				t.Errorf("the write the deposed leader resumed: %v, want fenced", err)
			}
			if err := old.Put(leader.WithEpoch(ctx, 4), set, []byte("late")); !errors.Is(err, leader.ErrFenced) {
				t.Errorf("a write of the deposed leader after: %v, want fenced", err)
			}
			if err := old.Delete(leader.WithEpoch(ctx, 4), set); !errors.Is(err, leader.ErrFenced) {
				t.Errorf("its delete: %v, want fenced", err)
			}
			if err := old.Put(ctx, key(kindReport, "p"), []byte("r")); err != nil {
				t.Errorf("its report: %v", err)
			}
			if err := next.Put(leader.WithEpoch(ctx, 7), set, []byte("c")); err != nil {
				t.Errorf("the leader of epoch 7 writes again: %v", err)
			}
			// A deposed leader's start of a producer lands late (it
			// paused right then) and takes the transactional id over:
			// the leader of epoch 7, its lease running, takes it back.
			late := NewKafka(opts, topic).(*kafkaChannel)
			defer late.Close()
			if err := late.Put(leader.WithEpoch(ctx, 4), set, []byte("late start")); err != nil {
				t.Fatal(err) // no lease check: as if its clock lied
			}
			if err := next.Put(leader.WithLease(ctx, 7, time.Now().Add(time.Minute)), set, []byte("d")); err != nil {
				t.Errorf("the leader of epoch 7, its lease running, after a late start: %v", err)
			}
			if err := late.Put(leader.WithEpoch(ctx, 4), set, []byte("late again")); !errors.Is(err, leader.ErrFenced) {
				t.Errorf("the late one's next write: %v, want fenced", err)
			}
			got := readAll(ctx, t, NewKafka(opts, topic))
			if got[set] != "a,b,c,late start,d" || got[key(kindReport, "p")] != "r" {
				t.Errorf("read %q, want the set written a,b,c,late start,d and the report r", got)
			}
		})
	}
}

// readAll reads the channel until synced and returns every key's values,
// in order, joined by commas.
func readAll(ctx context.Context, t *testing.T, ch Channel) map[string]string {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := map[string]string{}
	err := ch.Watch(wctx, func(k string, v []byte) {
		if got[k] != "" {
			got[k] += ","
		}
		got[k] += string(v)
	}, cancel)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the channel's state was not read in time")
	}
	return got
}

// BenchmarkKafkaChannelPut: the cost of the leader's fenced write (a
// transaction per record) beside a plain one, each of a ~1 KiB lease set,
// on the real broker (kafkatest.Bootstrap) or kfake. Each iteration writes
// once of each, alternating, so that both see the same load, 20 ms apart
// (untimed: the leader writes once or twice an interval); and 32 sets
// at once (PutAll: one transaction, fenced), as a publish writes them.
func BenchmarkKafkaChannelPut(b *testing.B) {
	for name, seeds := range kafkatest.Clusters() {
		b.Run(name, func(b *testing.B) {
			opts := []kgo.Opt{kgo.SeedBrokers(seeds(b)...)}
			topic := fmt.Sprintf("lagbridge-bench-%d.leases", time.Now().UnixNano())
			ch := NewKafka(opts, topic)
			defer ch.Close()
			defer func() {
				if cl, err := kgo.NewClient(opts...); err == nil {
					_, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topic)
					cl.Close()
				}
			}()
			ctx := context.Background()
			v := make([]byte, 1024)
			fctx := leader.WithEpoch(ctx, 1)
			for _, c := range []context.Context{ctx, fctx} { // the topic, the producer ids
				if err := ch.Put(c, "k", v); err != nil {
					b.Fatal(err)
				}
			}
			// One set, and the 32 sets of a publish, plain and fenced.
			sets := make([]entry, 32)
			for i := range sets {
				sets[i] = entry{fmt.Sprintf("s.p%d", i), v}
			}
			var plain, fenced, plain32, fenced32 time.Duration
			b.ResetTimer()
			for range b.N {
				for _, w := range []struct {
					ctx context.Context
					es  []entry
					sum *time.Duration
				}{{ctx, sets[:1], &plain}, {fctx, sets[:1], &fenced}, {ctx, sets, &plain32}, {fctx, sets, &fenced32}} {
					time.Sleep(20 * time.Millisecond) // a write now and then, as per interval
					start := time.Now()
					if err := ch.(batchPutter).PutAll(w.ctx, w.es); err != nil {
						b.Fatal(err)
					}
					*w.sum += time.Since(start)
				}
			}
			b.ReportMetric(float64(plain.Microseconds())/float64(b.N), "plain-us/put")
			b.ReportMetric(float64(plain32.Microseconds())/float64(b.N), "plain-us/32puts")
			b.ReportMetric(float64(fenced32.Microseconds())/float64(b.N), "fenced-us/32puts")
			b.ReportMetric(float64(fenced.Microseconds())/float64(b.N), "fenced-us/put")
		})
	}
}
