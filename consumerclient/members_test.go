package consumerclient

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
)

// TestKafkaReporterGroupMembers: a group of three franz-go members on
// kfake, each with its own hook, polling its own partitions at its own
// times while records keep coming. The daemon reads each partition from
// the report of the member that owns it; the members' poll starts differ
// (so quota's reportedPoll reads none, and a move is measured from reading
// to reading: docs/results.md, session 32, hookmembers). A member that
// leaves: its partitions are
// read from their new owners' reports. A member that hangs (stops polling
// and reporting, still in the group): its partitions fall back to commits
// once its last report is no longer fresh, and the target is no longer
// read from reports alone.
func TestKafkaReporterGroupMembers(t *testing.T) {
	const topic, group, parts = "members", "g", 6
	c := newKafkaCluster(t, topic, parts)
	obs, err := kafka.New(kafka.Config{Cluster: "main", Brokers: c.ListenAddrs(), RequestTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	const fresh = time.Second
	d := newTestDaemon(t, quotaserver.Auth{}, fresh, lag.KindKafka, obs)
	target := lag.Target{Kind: lag.KindKafka, Cluster: "main", Topic: topic, Group: group}

	// Records on every partition, all along.
	pctx, stopProduce := context.WithCancel(context.Background())
	var producing sync.WaitGroup
	defer func() { stopProduce(); producing.Wait() }()
	pcl := newKafkaClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	producing.Go(func() {
		for pctx.Err() == nil {
			for p := range int32(parts) {
				pcl.Produce(pctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v")}, nil)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	// owner: which member owns each partition, from the group's own
	// callbacks.
	var mu sync.Mutex
	owner := map[int32]string{}
	type member struct {
		name string
		rep  *KafkaReporter
		cl   *kgo.Client
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(name string) *member {
		rep, err := NewKafkaReporter(Config{URL: d.URL, Cluster: "main", Member: name, Interval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rep.Close)
		cl := newKafkaClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range a[topic] {
					owner[p] = name
				}
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range r[topic] {
					if owner[p] == name {
						delete(owner, p)
					}
				}
			}))
		ctx, cancel := context.WithCancel(context.Background())
		m := &member{name: name, rep: rep, cl: cl, stop: cancel, done: make(chan struct{})}
		go func() {
			defer close(m.done)
			for ctx.Err() == nil {
				cl.PollFetches(ctx)
				// A poll's work: its records stay in hand meanwhile.
				select {
				case <-ctx.Done():
				case <-time.After(70 * time.Millisecond):
				}
			}
		}()
		t.Cleanup(func() { cancel(); <-m.done })
		return m
	}
	ms := []*member{start("m0"), start("m1"), start("m2")}

	// fromOwners: every partition read from its owner's fresh report,
	// among members.
	fromOwners := func(members ...string) func(lag.State) bool {
		return func(st lag.State) bool {
			mu.Lock()
			defer mu.Unlock()
			if len(st.Partitions) != parts {
				return false
			}
			seen := map[string]bool{}
			for _, p := range st.Partitions {
				seen[p.Reported.Member] = true
				ok := false
				for _, m := range members {
					ok = ok || (p.Reported.Member == m && owner[p.Partition] == m)
				}
				if !ok || p.Source != lag.SourceConsumer {
					return false
				}
			}
			return len(seen) == len(members)
		}
	}
	st := d.waitState(t, target, "each partition read from its owner's report, three members", fromOwners("m0", "m1", "m2"))
	if st.Source != lag.SourceConsumer {
		t.Errorf("three reporting members: source %q, want %q", st.Source, lag.SourceConsumer)
	}
	// Each member's reports share one poll start; two members' do not.
	starts := map[string]map[time.Time]bool{}
	for _, p := range st.Partitions {
		r := p.Reported
		if r.Held <= 0 {
			continue
		}
		if starts[r.Member] == nil {
			starts[r.Member] = map[time.Time]bool{}
		}
		starts[r.Member][r.At.Add(-r.HeldFor)] = true
	}
	all := map[time.Time]bool{}
	for m, s := range starts {
		if len(s) != 1 {
			t.Errorf("member %s's partitions show %d poll starts, want 1: %v", m, len(s), s)
		}
		for at := range s {
			all[at] = true
		}
	}
	t.Logf("poll starts: %d members with records in hand, %d distinct", len(starts), len(all))
	if len(starts) > 1 && len(all) != len(starts) {
		t.Errorf("%d members in hand show %d distinct poll starts, want one each", len(starts), len(all))
	}

	// m2 leaves the group: its partitions go to m0 and m1, whose reports
	// take over.
	left := time.Now()
	ms[2].stop()
	<-ms[2].done
	ms[2].cl.Close()
	ms[2].rep.Close()
	d.waitState(t, target, "each partition read from its owner's report after m2 left", fromOwners("m0", "m1"))
	t.Logf("m2 left: every partition read from m0 and m1 after %v", time.Since(left).Round(10*time.Millisecond))

	// m1 hangs: it stops polling and reporting and stays in the group
	// (franz-go heartbeats on its own). Once its last report is no
	// longer fresh, its partitions are read from commits.
	mu.Lock()
	var hung []int32
	for p, m := range owner {
		if m == "m1" {
			hung = append(hung, p)
		}
	}
	mu.Unlock()
	hangAt := time.Now()
	ms[1].stop()
	<-ms[1].done
	ms[1].rep.Close()
	st = d.waitState(t, target, "m1's partitions read from commits", func(st lag.State) bool {
		for _, p := range st.Partitions {
			if p.Reported.Member == "m1" {
				return false
			}
		}
		return true
	})
	waited := time.Since(hangAt)
	t.Logf("m1 hung: its partitions %v left its reports after %v (fresh %v); target source %q", hung, waited.Round(10*time.Millisecond), fresh, st.Source)
	if waited < fresh {
		t.Errorf("m1's reports left after %v, before they were %v old", waited, fresh)
	}
	for _, p := range st.Partitions {
		if owned := fmt.Sprint(hung); p.Source == lag.SourceConsumer && p.Reported.Member != "m0" {
			t.Errorf("partition %d (m1's: %s) still read from a report of %q", p.Partition, owned, p.Reported.Member)
		}
	}
	if st.Source == lag.SourceConsumer && st.Lag > 0 {
		t.Errorf("a hung member's partitions behind: target source %q, want the commits' (not every lagging partition is reported)", st.Source)
	}
}

// TestKafkaReporterMemberWithoutHook: a member with the hook beside one
// without. Each partition is read from what speaks for it: the hooked
// member's from its reports, the other's from the broker (no commit yet:
// from first sight). The target as a whole is read from the less exact
// source (lag.State.Source), so the controller reads it as a consumer
// seen through the broker, not through reports alone (once a partition
// read from the broker is behind: partitions without lag do not count).
func TestKafkaReporterMemberWithoutHook(t *testing.T) {
	const topic, group, parts = "mixed", "g", 4
	c := newKafkaCluster(t, topic, parts)
	obs, err := kafka.New(kafka.Config{Cluster: "main", Brokers: c.ListenAddrs(), RequestTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	d := newTestDaemon(t, quotaserver.Auth{}, time.Second, lag.KindKafka, obs)
	target := lag.Target{Kind: lag.KindKafka, Cluster: "main", Topic: topic, Group: group}
	pctx, stopProduce := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	defer func() { stopProduce(); bg.Wait() }()
	pcl := newKafkaClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	bg.Go(func() {
		for pctx.Err() == nil {
			for p := range int32(parts) {
				pcl.Produce(pctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v")}, nil)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	rep, err := NewKafkaReporter(Config{URL: d.URL, Cluster: "main", Member: "hooked", Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	var mu sync.Mutex
	plainOwns := map[int32]bool{}
	hooked := newKafkaClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	plain := newKafkaClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range a[topic] {
				plainOwns[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range r[topic] {
				delete(plainOwns, p)
			}
		}))
	for _, cl := range []*kgo.Client{hooked, plain} {
		bg.Go(func() {
			for pctx.Err() == nil {
				cl.PollFetches(pctx)
				select {
				case <-pctx.Done():
				case <-time.After(70 * time.Millisecond):
				}
			}
		})
	}
	st := d.waitState(t, target, "the hooked member's partitions reported, the other's not", func(st lag.State) bool {
		mu.Lock()
		defer mu.Unlock()
		if len(st.Partitions) != parts || len(plainOwns) == 0 || len(plainOwns) == parts {
			return false
		}
		behind := false
		for _, p := range st.Partitions {
			if plainOwns[p.Partition] == (p.Reported.Member == "hooked") {
				return false
			}
			behind = behind || plainOwns[p.Partition] && p.Lag > 0
		}
		return behind
	})
	for _, p := range st.Partitions {
		mu.Lock()
		own := plainOwns[p.Partition]
		mu.Unlock()
		if want := lag.SourceConsumer; !own && p.Source != want {
			t.Errorf("partition %d (the hooked member's): source %q, want %q", p.Partition, p.Source, want)
		}
		if own && p.Source == lag.SourceConsumer {
			t.Errorf("partition %d (the member without the hook): read from a report", p.Partition)
		}
	}
	if st.Source == lag.SourceConsumer {
		t.Errorf("target source %q with a partition behind read from the broker, want the less exact source", st.Source)
	}
	t.Logf("target source %q, lag %d; partitions: %s", st.Source, st.Lag, func() string {
		var b []string
		for _, p := range st.Partitions {
			b = append(b, fmt.Sprintf("%d:%s", p.Partition, p.Source))
		}
		return fmt.Sprint(b)
	}())
}
