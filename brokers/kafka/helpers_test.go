package kafka

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/lagbridge/lagbridge/internal/testutil"
	"github.com/lagbridge/lagbridge/lag"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(benchBrokerEnv); spec != "" {
		os.Exit(serveBenchBroker(spec))
	}
	goleak.VerifyTestMain(m)
}

// base is a fixed time for record timestamps; tests compare head times to
// it exactly.
var base = time.UnixMilli(1_700_000_000_000)

func newCluster(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	opts = append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}),
	}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func newObserver(tb testing.TB, c *kfake.Cluster, mutate func(*Config), opts ...kgo.Opt) *Observer {
	tb.Helper()
	cfg := Config{Cluster: "test", Brokers: c.ListenAddrs(), RequestTimeout: 3 * time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	o, err := New(cfg, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(o.Close)
	return o
}

func newClient(tb testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func createTopic(tb testing.TB, adm *kadm.Client, topic string, partitions int32, configs map[string]*string) {
	tb.Helper()
	resp, err := adm.CreateTopic(ctxT(tb), partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		tb.Fatalf("create topic %s: %v", topic, err)
	}
}

// rec is a record for partition p at base + sec seconds.
func rec(topic string, p int32, sec int, value string) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Value: []byte(value), Timestamp: base.Add(time.Duration(sec) * time.Second)}
}

func produce(tb testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	tb.Helper()
	if err := cl.ProduceSync(ctxT(tb), recs...).FirstErr(); err != nil {
		tb.Fatalf("produce: %v", err)
	}
}

// produceN produces n records to topic/p, one second apart starting at
// base + startSec, in one batch.
func produceN(tb testing.TB, cl *kgo.Client, topic string, p int32, n, startSec int) {
	tb.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = rec(topic, p, startSec+i, fmt.Sprint(startSec+i))
	}
	produce(tb, cl, recs...)
}

func commit(tb testing.TB, adm *kadm.Client, group, topic string, offsets map[int32]int64) {
	tb.Helper()
	os := make(kadm.Offsets)
	for p, at := range offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
	}
	if err := adm.CommitAllOffsets(ctxT(tb), group, os); err != nil {
		tb.Fatalf("commit %s: %v", group, err)
	}
}

func observe(tb testing.TB, o *Observer) []lag.Sample {
	tb.Helper()
	s, err := o.Observe(ctxT(tb))
	if err != nil {
		tb.Fatalf("observe: %v", err)
	}
	return s
}

func find(samples []lag.Sample, group, topic string) *lag.Sample {
	for i := range samples {
		if samples[i].Target.Group == group && samples[i].Target.Topic == topic {
			return &samples[i]
		}
	}
	return nil
}

func mustFind(tb testing.TB, samples []lag.Sample, group, topic string) *lag.Sample {
	tb.Helper()
	s := find(samples, group, topic)
	if s == nil {
		tb.Fatalf("no sample for group %q topic %q in %s", group, topic, dump(samples))
	}
	return s
}

func dump(samples []lag.Sample) string {
	var b strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&b, "\n  %s state=%q members=%d err=%q", s.Target, s.GroupState, s.Members, s.Err)
		for _, p := range s.Partitions {
			fmt.Fprintf(&b, "\n    p%d start=%d end=%d committed=%d lag=%d head=%v known=%v stale=%v err=%q",
				p.Partition, p.LogStart, p.End, p.Committed, p.Lag, p.HeadTime.UnixMilli(), p.HeadKnown, p.Stale, p.Err)
		}
	}
	return b.String()
}

// eventually polls observe until cond holds or the deadline passes. It
// returns the samples that satisfied cond.
func eventually(tb testing.TB, o *Observer, what string, cond func([]lag.Sample) bool) []lag.Sample {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last []lag.Sample
	for time.Now().Before(deadline) {
		last = observe(tb, o)
		if cond(last) {
			return last
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not a wait for the result
	}
	tb.Fatalf("timed out waiting for %s; last: %s", what, dump(last))
	return nil
}

// countRequests counts the requests of key that the cluster handles.
func countRequests(c *kfake.Cluster, key kmsg.Key) *atomic.Int64 {
	var n atomic.Int64
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

// wantPart checks the fields of one partition sample that a case cares
// about; head is the head's second offset from base, -1 for no head time.
func wantPart(tb testing.TB, s *lag.Sample, p int32, logStart, end, committed, lagN int64, head int) {
	tb.Helper()
	if int(p) >= len(s.Partitions) {
		tb.Fatalf("%s: no partition %d", s.Target, p)
	}
	ps := s.Partitions[p]
	if ps.Stale || ps.Err != "" {
		tb.Fatalf("%s p%d: stale=%v err=%q", s.Target, p, ps.Stale, ps.Err)
	}
	if ps.LogStart != logStart || ps.End != end || ps.Committed != committed || ps.Lag != lagN {
		tb.Fatalf("%s p%d: start/end/committed/lag = %d/%d/%d/%d, want %d/%d/%d/%d",
			s.Target, p, ps.LogStart, ps.End, ps.Committed, ps.Lag, logStart, end, committed, lagN)
	}
	if !ps.HeadKnown {
		tb.Fatalf("%s p%d: head unknown", s.Target, p)
	}
	switch {
	case head < 0 && !ps.HeadTime.IsZero():
		tb.Fatalf("%s p%d: head time %v, want zero", s.Target, p, ps.HeadTime)
	case head >= 0 && !ps.HeadTime.Equal(base.Add(time.Duration(head)*time.Second)):
		tb.Fatalf("%s p%d: head time at +%v, want +%ds", s.Target, p, ps.HeadTime.Sub(base), head)
	}
}

// wantUncommitted checks that partition p of s was read (log start and end)
// and has no commit, so its lag and head are unknown: Lag 0, no head.
func wantUncommitted(tb testing.TB, s *lag.Sample, p int32, logStart, end int64) {
	tb.Helper()
	if int(p) >= len(s.Partitions) {
		tb.Fatalf("%s: no partition %d", s.Target, p)
	}
	ps := s.Partitions[p]
	if ps.Stale || ps.Err != "" || ps.LogStart != logStart || ps.End != end || ps.Committed != -1 ||
		ps.Lag != 0 || ps.HeadKnown || !ps.HeadTime.IsZero() {
		tb.Fatalf("%s p%d: %+v; want log start %d, end %d, no commit, lag 0, no head", s.Target, p, ps, logStart, end)
	}
}

// pollAndCommit polls cons until it has seen n records, then commits what
// it consumed.
func pollAndCommit(tb testing.TB, cons *kgo.Client, n int) {
	tb.Helper()
	for seen := 0; seen < n; {
		fs := cons.PollFetches(ctxT(tb))
		if err := fs.Err0(); err != nil {
			tb.Fatal(err)
		}
		seen += fs.NumRecords()
	}
	if err := cons.CommitUncommittedOffsets(ctxT(tb)); err != nil {
		tb.Fatal(err)
	}
}

// joinPreparing has a new member join the classic group on topic (its
// member holds it): the group waits in PreparingRebalance for the others
// to rejoin, which they never do within their rebalance timeout. It
// returns when the group is there; the func it returns ends the join.
func joinPreparing(tb testing.TB, c *kfake.Cluster, adm *kadm.Client, group, topic string) func() {
	tb.Helper()
	jctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	clb := newClient(tb, c)
	go func() { defer close(done); _, _ = testutil.JoinClassic(jctx, clb, group, "", topic) }()
	end := func() { stop(); <-done }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		dg, err := adm.DescribeGroups(ctxT(tb), group)
		if err == nil && dg[group].State == "PreparingRebalance" {
			return end
		}
		if time.Now().After(deadline) {
			end()
			tb.Fatalf("%s never went PreparingRebalance: %v %+v", group, err, dg)
		}
	}
}
