package consumerclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/importcheck"
	"github.com/lagbridge/lagbridge/internal/quotaserver"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/ttl/kafkaguard"
)

// TestImports: franz-go, nats.go, client_golang and the protocol's wire
// types; never the daemon's packages or viper.
func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "github.com/twmb/franz-go/pkg/kgo", "github.com/nats-io/nats.go/jetstream",
		"github.com/prometheus/client_golang/prometheus", "github.com/lagbridge/lagbridge/producerclient/quotaproto")
}

func newKafkaCluster(tb testing.TB, topic string, partitions int32) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic),
		kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "100"}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func newKafkaClient(tb testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// produce writes n records to topic's partition, stamped ts, ts+1ms, ...
func produce(tb testing.TB, c *kfake.Cluster, topic string, partition int32, n int, ts time.Time) {
	tb.Helper()
	cl := newKafkaClient(tb, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Value: []byte("v"), Timestamp: ts.Add(time.Duration(i) * time.Millisecond)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
	cl.Close()
}

// pollN polls until it has n records in all, and returns the records of
// the last poll (the ones in hand).
func pollN(tb testing.TB, cl *kgo.Client, n int) []*kgo.Record {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var last []*kgo.Record
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			tb.Fatalf("polled %d of %d records: %v", got, n, err)
		}
		fs.EachError(func(t string, p int32, err error) { tb.Fatalf("fetch %s[%d]: %v", t, p, err) })
		if recs := fs.Records(); len(recs) > 0 {
			last = recs
			got += len(recs)
		}
	}
	return last
}

// TestKafkaReporterEndToEnd: a franz-go group consumer with the library's
// default 5s auto-commit and the hook, nothing else changed. The daemon's
// sample carries, within a report period, the position of the records the
// consumer has in hand and their timestamp; once the consumer asks for
// more, the partition is idle at its end; when reports stop, the daemon
// falls back to commits.
func TestKafkaReporterEndToEnd(t *testing.T) {
	const topic, group = "orders", "billing"
	c := newKafkaCluster(t, topic, 2)
	obs, err := kafka.New(kafka.Config{Cluster: "main", Brokers: c.ListenAddrs(), RequestTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	d := newTestDaemon(t, quotaserver.Auth{}, 500*time.Millisecond, lag.KindKafka, obs)
	rep, err := NewKafkaReporter(Config{URL: d.URL, Cluster: "main", Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	cl := newKafkaClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))

	// Phase A: five records per partition, consumed and committed, so
	// that the group has offsets the daemon watches.
	start := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	produce(t, c, topic, 0, 5, start)
	produce(t, c, topic, 1, 5, start)
	pollN(t, cl, 10)
	if err := cl.CommitUncommittedOffsets(context.Background()); err != nil {
		t.Fatal(err)
	}
	target := lag.Target{Kind: lag.KindKafka, Cluster: "main", Topic: topic, Group: group}

	// Phase B: five more on partition 0, two seconds old. The consumer
	// polls them and holds them: nothing commits them (auto-commit runs
	// every 5s), yet the daemon sees them in hand.
	head := time.Now().Add(-2 * time.Second).Truncate(time.Millisecond)
	produce(t, c, topic, 0, 5, head)
	inHand := pollN(t, cl, 5)
	polled := time.Now()
	first := inHand[0]
	st := d.waitState(t, target, "records in hand reported", func(st lag.State) bool {
		return len(st.Partitions) == 2 && st.Partitions[0].Reported.Position == first.Offset && st.Partitions[1].Reported.Position == 5 &&
			st.Source == lag.SourceConsumer && st.Lag == 10-first.Offset
	})
	seen := time.Since(polled)
	p0, p1 := st.Partitions[0], st.Partitions[1]
	if !p0.Reported.HeadTime.Equal(first.Timestamp) {
		t.Errorf("partition 0 head time %v, want the first record in hand's %v", p0.Reported.HeadTime, first.Timestamp)
	}
	if !p1.Reported.HeadTime.IsZero() {
		t.Errorf("partition 1 has nothing in hand, reported head time %v", p1.Reported.HeadTime)
	}
	// The hook reports every 50ms and the loop observes every 100ms.
	if seen > time.Second {
		t.Errorf("the daemon saw the consumer's position %v after the poll, want well within a second", seen)
	}
	t.Logf("reported after %v: partition 0 %+v (committed %d, end %d)", seen, p0.Reported, p0.Committed, p0.End)

	// It says how many records it holds and for how long it has held
	// them without finishing one: the poll's, since the poll.
	held := int64(len(inHand))
	st = d.waitState(t, target, "records held for 300ms reported", func(st lag.State) bool {
		return st.Partitions[0].Reported.HeldFor >= 300*time.Millisecond
	})
	if r := st.Partitions[0].Reported; r.Held != held || r.HeldFor > time.Since(polled) {
		t.Errorf("partition 0 reported %d held for %v, want the %d of the poll, for at most the %v since it",
			r.Held, r.HeldFor, held, time.Since(polled))
	}
	if r := st.Partitions[1].Reported; r.Held != 0 || r.HeldFor != 0 {
		t.Errorf("partition 1 holds nothing, reported %d held for %v", r.Held, r.HeldFor)
	}

	// The consumer asks for more: everything it had is finished and
	// partition 0 is idle at its end.
	pollCtx, stopPoll := context.WithCancel(context.Background())
	polling := make(chan struct{})
	go func() { defer close(polling); cl.PollFetches(pollCtx) }()
	defer func() { stopPoll(); <-polling }()
	d.waitState(t, target, "idle at the end", func(st lag.State) bool {
		r := st.Partitions[0].Reported
		return !r.IsZero() && r.Position == 10 && r.HeadTime.IsZero()
	})

	// Reports stop: the daemon falls back to commits.
	rep.Close()
	d.waitState(t, target, "fallback to commits", func(st lag.State) bool {
		return st.Partitions[0].Reported.IsZero() && st.Partitions[1].Reported.IsZero()
	})
}

// TestKafkaReporterRevokedPartitions: once a second member takes
// partitions over, the first stops reporting them.
func TestKafkaReporterRevokedPartitions(t *testing.T) {
	const topic, group = "revoked", "g"
	c, rep := fourPartitions(t, topic, false)
	cl1 := newKafkaClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	pollN(t, cl1, 12)
	reported := func() int {
		_, topics := rep.snapshot(time.Now())
		n := 0
		for _, tp := range topics {
			n += len(tp.Partitions)
		}
		return n
	}
	if n := reported(); n != 4 {
		t.Fatalf("alone in the group, the member reports %d partitions, want 4", n)
	}
	// A second member joins; the first keeps polling so that the
	// rebalance completes.
	cl2 := newKafkaClient(t, c, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl1.PollFetches(ctx)
		}
	}()
	go func() {
		for ctx.Err() == nil {
			cl2.PollFetches(ctx)
		}
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, "the first member reports only its remaining partitions", func() bool {
		n := reported()
		return n > 0 && n < 4
	})
}

// fourPartitions is a cluster with topic of four partitions, three records
// each, and a reporter (keep: KeepUntilFinished) that reports every 20ms
// to a daemon.
func fourPartitions(tb testing.TB, topic string, keep bool) (*kfake.Cluster, *KafkaReporter) {
	tb.Helper()
	c := newKafkaCluster(tb, topic, 4)
	for p := range int32(4) {
		produce(tb, c, topic, p, 3, time.Now())
	}
	d := newTestDaemon(tb, quotaserver.Auth{}, time.Second, lag.KindKafka, nil)
	rep, err := NewKafkaReporter(Config{URL: d.URL, Interval: 20 * time.Millisecond, KeepUntilFinished: keep})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rep.Close)
	return c, rep
}

// TestKafkaReporterDaemonDown: a daemon that cannot be reached never
// blocks the consumer; its reports are dropped and counted. The URL's
// user information (http://user:password@host is valid) is in neither
// the metric's url label nor the log.
func TestKafkaReporterDaemonDown(t *testing.T) {
	const topic = "down"
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 20, time.Now())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://alice:s3cret@" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	reg := prometheus.NewPedanticRegistry()
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	rep, err := NewKafkaReporter(Config{URL: dead, Interval: 10 * time.Millisecond, Registerer: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	cl := newKafkaClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	pollN(t, cl, 20)
	waitFor(t, "failed reports counted", func() bool { return rep.s.count(outcomeFailed) >= 3 })
	if n := testutil.CollectAndCount(reg, "lagbridge_client_consumer_reports_total"); n != 3 {
		t.Errorf("%d outcome series, want 3 (sent, refused, failed)", n)
	}
	if rep.s.count(outcomeSent) != 0 {
		t.Errorf("sent %d reports to a closed port", rep.s.count(outcomeSent))
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "s3cret") || strings.Contains(l.GetValue(), "alice") {
					t.Errorf("metric label %s=%q names the URL's user information", l.GetName(), l.GetValue())
				}
			}
		}
	}
	if out := logged.String(); !strings.Contains(out, "cannot send reports") || strings.Contains(out, "s3cret") {
		t.Errorf("the log does not warn, or names the URL's password:\n%s", out)
	}
}

// writerFunc is an io.Writer from a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestKafkaReporterRefused: a token the daemon does not know gets the
// reports refused (counted as such), and the consumer goes on.
func TestKafkaReporterRefused(t *testing.T) {
	const topic = "refused"
	c := newKafkaCluster(t, topic, 1)
	produce(t, c, topic, 0, 3, time.Now())
	d := newTestDaemon(t, quotaserver.Auth{Tokens: []quotaserver.Token{{Token: "a-token-of-sixteen", Producers: []string{"billing"}}}},
		time.Second, lag.KindKafka, nil)
	for _, tc := range []struct {
		name, token, group string
		sent               bool
	}{
		{"unknown token", "not-the-right-token", "billing", false},
		{"group not listed", "a-token-of-sixteen", "shipping", false},
		{"token and group", "a-token-of-sixteen", "billing", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := NewKafkaReporter(Config{URL: d.URL, Token: tc.token, Interval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer rep.Close()
			cl := newKafkaClient(t, c, kgo.ConsumerGroup(tc.group), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
			pollN(t, cl, 3)
			if tc.sent {
				waitFor(t, "a report stored", func() bool { return rep.s.count(outcomeSent) > 0 })
			} else {
				waitFor(t, "a report refused", func() bool { return rep.s.count(outcomeRefused) > 0 })
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"minimal", Config{URL: "http://lagbridge:9464"}, nil},
		{"https with everything", Config{URL: "https://lagbridge:9464/", Token: "t", Cluster: "main", Group: "billing v2",
			Member: "pod-1", Interval: time.Second, Timeout: 10 * time.Second}, nil},
		{"no url", Config{}, []string{"url"}},
		{"not http", Config{URL: "nats://x:4222"}, []string{"url"}},
		{"bad group and member", Config{URL: "http://x", Group: "a\x00", Member: "a b"}, []string{"group", "member"}},
		{"interval out of range", Config{URL: "http://x", Interval: 5 * time.Second}, []string{"interval"}},
		{"negative timeout", Config{URL: "http://x", Timeout: -1}, []string{"timeout"}},
		// A bearer token never crosses the network in clear by default.
		{"token over http", Config{URL: "http://lagbridge:9464", Token: "t"}, []string{"in clear", "Config.AllowPlaintextToken"}},
		{"token over http, allowed", Config{URL: "http://lagbridge:9464", Token: "t", AllowPlaintextToken: true}, nil},
		{"token over http to loopback", Config{URL: "http://127.0.0.1:9464", Token: "t"}, nil},
		{"token over http to localhost", Config{URL: "http://localhost:9464", Token: "t"}, nil},
		{"token over http to ::1", Config{URL: "http://[::1]:9464", Token: "t"}, nil},
		{"replicas only", Config{URLs: []string{"http://lagbridge-0:9464", "http://lagbridge-1:9464"}}, nil},
		{"a replica not http", Config{URL: "http://x", URLs: []string{"lagbridge-1:9464"}}, []string{"lagbridge-1:9464"}},
		{"token over http to a replica", Config{URL: "https://x", URLs: []string{"http://lagbridge-1:9464"}, Token: "t"}, []string{"in clear"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("%v does not wrap ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not mention %s", err, w)
				}
			}
		})
	}
	if _, err := NewKafkaReporter(Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewKafkaReporter with no URL: %v", err)
	}
}

// TestKafkaGuardProgress: with a ttl/kafkaguard guard as the reporter's
// Progress, the position moves record by record between polls: while the
// handler works on a record, every earlier one, handled or skipped as
// dead work, is behind the position.
func TestKafkaGuardProgress(t *testing.T) {
	const topic = "guarded"
	c := newKafkaCluster(t, topic, 1)
	old := time.Now().Add(-time.Minute)
	produce(t, c, topic, 0, 3, old)        // offsets 0-2: dead work at maxAge 10s
	produce(t, c, topic, 0, 3, time.Now()) // offsets 3-5: live
	d := newTestDaemon(t, quotaserver.Auth{}, time.Second, lag.KindKafka, nil)
	rep, err := NewKafkaReporter(Config{URL: d.URL, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	g, err := kafkaguard.New(kafkaguard.Config{MaxAge: 10 * time.Second, Progress: rep})
	if err != nil {
		t.Fatal(err)
	}
	cl := newKafkaClient(t, c, kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic), kgo.WithHooks(rep.Hook()))
	var recs []*kgo.Record
	for len(recs) < 6 {
		recs = append(recs, pollN(t, cl, 1)...)
	}
	var positions []int64
	// finished: no later than the guard's last Finished (before the first
	// record, it skips the expired ones; then as each handler returns).
	finished := time.Now()
	_, err = g.Process(context.Background(), recs, func(_ context.Context, r *kgo.Record) error {
		now := time.Now()
		_, topics := rep.snapshot(now)
		p := topics[0].Partitions[0]
		// None finished since the last Finished, not since the poll: a
		// Finished restarts heldMs (else held/heldMs under-reads the
		// capacity by the time the earlier records took).
		if p.HeldMs > now.Sub(finished).Milliseconds() {
			t.Errorf("handling offset %d, the reporter says none finished for %d ms, the last was finished %v ago", r.Offset, p.HeldMs, now.Sub(finished))
		}
		defer func() { finished = time.Now() }()
		time.Sleep(100 * time.Millisecond) // the handler's work
		positions = append(positions, p.Position)
		if p.Position != r.Offset || p.HeadTimeMs == 0 {
			t.Errorf("handling offset %d, the reporter says %+v", r.Offset, p)
		}
		// The guard told the reporter (its kafkaguard.Skipper) of the
		// three it skipped as expired.
		if p.Skipped == nil || *p.Skipped != 3 {
			t.Errorf("handling offset %d, the reporter counts %v skipped, want 3", r.Offset, p.Skipped)
		}
		// The records of the batch from this one on are held.
		if want := recs[len(recs)-1].Offset - r.Offset + 1; p.Held != want {
			t.Errorf("handling offset %d, the reporter says %d held, want %d", r.Offset, p.Held, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The three expired records were skipped before the first live one.
	if want := []int64{3, 4, 5}; !slices.Equal(positions, want) {
		t.Errorf("positions while handling %v, want %v", positions, want)
	}
	if _, topics := rep.snapshot(time.Now()); !topics[0].Partitions[0].Idle || topics[0].Partitions[0].Position != 6 || *topics[0].Partitions[0].Skipped != 3 {
		t.Errorf("after the batch: %+v, want idle at 6", topics[0].Partitions[0])
	}
}

// TestSplit: reports stay within the protocol's limits, every partition in
// exactly one of them.
func TestSplit(t *testing.T) {
	parts := func(n int) []quotaproto.ConsumerPartition {
		ps := make([]quotaproto.ConsumerPartition, n)
		for i := range ps {
			ps[i] = quotaproto.ConsumerPartition{Partition: int32(i), Idle: true}
		}
		return ps
	}
	topics := func(n, each int) []quotaproto.ConsumerTopic {
		ts := make([]quotaproto.ConsumerTopic, n)
		for i := range ts {
			ts[i] = quotaproto.ConsumerTopic{Topic: fmt.Sprintf("t%d", i), Partitions: parts(each)}
		}
		return ts
	}
	cases := []struct {
		name    string
		topics  []quotaproto.ConsumerTopic
		reports int
	}{
		{"nothing", nil, 0},
		{"one small", topics(1, 3), 1},
		{"exactly the partition limit", topics(1, quotaproto.MaxReportPartitions), 1},
		// A topic larger than a report is cut across reports.
		{"one large topic", topics(1, 1000), 2},
		{"many topics", topics(quotaproto.MaxReportTopics+6, 1), 2},
		{"both limits", topics(100, 12), 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := split(tc.topics)
			if len(out) != tc.reports {
				t.Errorf("%d reports, want %d", len(out), tc.reports)
			}
			seen := map[string]int{}
			for _, rep := range out {
				r := quotaproto.ConsumerReport{Kind: quotaproto.KindKafka, Group: "g", Topics: rep}
				if err := r.Validate(); err != nil {
					t.Errorf("a report is invalid: %v", err)
				}
				for _, tp := range rep {
					seen[tp.Topic] += len(tp.Partitions)
				}
			}
			for _, tp := range tc.topics {
				if seen[tp.Topic] != len(tp.Partitions) {
					t.Errorf("topic %s: %d partitions reported, want %d", tp.Topic, seen[tp.Topic], len(tp.Partitions))
				}
			}
		})
	}
}
