package publish

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSampleCountsBatches: a partition tail sample counts the records per
// batch producers wrote, also on a topic written in transactions, whose
// last offset is a commit marker no record is returned for (and which is
// no batch a producer is charged for).
func TestSampleCountsBatches(t *testing.T) {
	cases := []struct {
		name string
		txn  bool
	}{
		{"plain batches", false},
		{"transactional batches", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			seeds := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
			opts := append(seeds, kgo.DefaultProduceTopic("t"))
			if tc.txn {
				opts = append(opts, kgo.TransactionalID("txn"))
			}
			prod, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(prod.Close)
			const batches, perBatch = 4, 5
			for b := range batches {
				if tc.txn {
					if err := prod.BeginTransaction(); err != nil {
						t.Fatal(err)
					}
				}
				recs := make([]*kgo.Record, perBatch)
				for i := range recs {
					recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "%d-%d", b, i)}
				}
				if err := prod.ProduceSync(ctx(t), recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if tc.txn {
					if err := prod.EndTransaction(ctx(t), kgo.TryCommit); err != nil {
						t.Fatal(err)
					}
				}
			}
			end, err := endOffset(t, seeds)
			if err != nil {
				t.Fatal(err)
			}
			r := &RecordSizes{opts: seeds}
			tl := r.sample(ctx(t), "t", 0, 0, end)
			if tl.records != batches*perBatch || tl.batches != batches {
				t.Errorf("sampled %v records in %v batches (end offset %d), want %d in %d", tl.records, tl.batches, end, batches*perBatch, batches)
			}
		})
	}
}

func endOffset(tb testing.TB, seeds []kgo.Opt) (int64, error) {
	cl, err := kgo.NewClient(seeds...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx(tb), "t")
	if err != nil {
		return 0, err
	}
	o, _ := ends.Lookup("t", 0)
	return o.Offset, o.Err
}

// newClients counts the clients built with the options it is hooked into.
type newClients struct{ n atomic.Int32 }

func (h *newClients) OnNewClient(*kgo.Client) { h.n.Add(1) }

// TestMeasureUnreadableTailNotRetriedEachRound: a topic whose tail cannot
// be read (here: the sample's client reaches no broker; in production, a
// daemon without Read on the topic) is not sampled again at every call,
// each attempt costing up to SampleTimeout of the publish: once it failed, it is
// sampled again only every SampleEvery calls.
func TestMeasureUnreadableTailNotRetriedEachRound(t *testing.T) {
	r, made, produce := unreadableTails(t, "t")
	measure := func() {
		t.Helper()
		mctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := r.Measure(mctx, []string{"t"}); err != nil {
			t.Fatal(err)
		}
	}
	measure() // the first reading: nothing written yet, no tail to read
	produce("t")
	measure() // grown, no sample yet: one attempt, which fails
	if got := made.n.Load(); got != 1 {
		t.Fatalf("%d sample attempts after the first growth, want 1", got)
	}
	for range SampleEvery - 2 {
		produce("t")
		measure()
	}
	if got := made.n.Load(); got != 1 {
		t.Fatalf("%d sample attempts in the %d calls after a failed one, want it not retried before a SampleEvery-th call", got, SampleEvery-2)
	}
	produce("t")
	measure() // a SampleEvery-th call
	if got := made.n.Load(); got != 2 {
		t.Fatalf("%d sample attempts after a SampleEvery-th call, want one retry then", got)
	}
}

// unreadableTails is a RecordSizes on a kfake cluster holding topics,
// whose tail samples dial a port nothing listens on (as a daemon without
// Read on the topics fails them), the count of sample clients built, and
// a func that writes MinRecords records to a topic.
func unreadableTails(tb testing.TB, topics ...string) (*RecordSizes, *newClients, func(topic string)) {
	tb.Helper()
	_, cl := kfakeClient(tb, kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	r := NewRecordSizes(cl)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	made := new(newClients)
	r.opts = []kgo.Opt{kgo.SeedBrokers(addr), kgo.WithHooks(made)}
	produce := func(topic string) {
		tb.Helper()
		recs := make([]*kgo.Record, MinRecords)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: []byte("v")}
		}
		if err := cl.ProduceSync(ctx(tb), recs...).FirstErr(); err != nil {
			tb.Fatal(err)
		}
	}
	return r, made, produce
}

// TestMeasureSamplesShareTimeout: the tail samples of one call to Measure
// share SampleTimeout, so that two topics whose tails cannot be read hold
// the publish SampleTimeout, not twice that (out of the publisher's
// 10 s, nothing would be left to apply the quotas).
func TestMeasureSamplesShareTimeout(t *testing.T) {
	r, made, produce := unreadableTails(t, "a", "b")
	topics := []string{"a", "b"}
	if err := r.Measure(ctx(t), topics); err != nil { // nothing written yet
		t.Fatal(err)
	}
	for _, tp := range topics {
		produce(tp)
	}
	start := time.Now()
	if err := r.Measure(ctx(t), topics); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 2*SampleTimeout-time.Second {
		t.Errorf("Measure took %v sampling two unreadable tails, want about SampleTimeout (%v) for both", took, SampleTimeout)
	}
	if got := made.n.Load(); got != 1 {
		t.Errorf("%d sample attempts, want 1: none once the first took SampleTimeout", got)
	}
}

// advancing is a clock that a hook moves on: every client built with it
// (a tail sample's) takes Step of its time.
type advancing struct {
	mu   sync.Mutex
	now  time.Time
	Step time.Duration
}

func (c *advancing) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *advancing) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *advancing) OnNewClient(*kgo.Client) { c.Add(c.Step) }

// TestRecordSizesRateIgnoresSampleTime: Rate is the records a topic's end
// offsets grew by over the time between the readings of those offsets,
// not over a span that also counts the tail samples taken meanwhile (a
// sample of 10 s here; tens to hundreds of milliseconds against a real
// cluster, each SampleEvery calls, out of a 1 s interval).
func TestRecordSizesRateIgnoresSampleTime(t *testing.T) {
	_, cl := kfakeClient(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "a", "b"))
	clock := &advancing{now: time.Unix(1000, 0), Step: 10 * time.Second}
	r := NewRecordSizes(cl)
	r.Now = clock.Now
	r.opts = append(slices.Clip(r.opts), kgo.WithHooks(clock))
	topics := []string{"a", "b"}
	produce := func() {
		t.Helper()
		var recs []*kgo.Record
		for _, tp := range topics {
			for range 100 {
				recs = append(recs, &kgo.Record{Topic: tp, Value: []byte("v")})
			}
		}
		if err := cl.ProduceSync(ctx(t), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Measure(ctx(t), topics); err != nil { // nothing written yet
		t.Fatal(err)
	}
	clock.Add(10 * time.Second)
	produce() // 100 records to each topic in the 10 s between readings
	// The second reading samples both tails (their records per batch),
	// each taking 10 s of the clock, after reading the offsets.
	if err := r.Measure(ctx(t), topics); err != nil {
		t.Fatal(err)
	}
	for _, tp := range topics {
		if got, ok := r.Rate(tp); !ok || got != 10 {
			t.Errorf("Rate(%s) = %v, %v; want 10 records/s, true", tp, got, ok)
		}
	}
}

// TestMeasureSizesTopicAtFirstReading: a RecordSizes that first reads a
// topic already written (a daemon that starts, a replica that takes over
// leading) knows its size at once, from the tail of its fullest
// partition, within 10% of what one that watched the log grow measured:
// the first client quotas it writes are not sized by
// DefaultBytesPerMessage, a guess several times too high for small records.
// A topic never written has no size.
func TestMeasureSizesTopicAtFirstReading(t *testing.T) {
	_, cl := kfakeClient(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "t", "empty"))
	watcher := NewRecordSizes(cl)
	if err := watcher.Measure(ctx(t), []string{"t"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * SampleRecords { // one record per request, as a request handler sends
		rec := &kgo.Record{Topic: "t", Value: fmt.Appendf(nil, "order-%06d", i)}
		if err := cl.ProduceSync(ctx(t), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := watcher.Measure(ctx(t), []string{"t"}); err != nil {
		t.Fatal(err)
	}
	want, ok := watcher.Charged("t", "legacy")
	if !ok {
		t.Fatal("the watcher measured no size")
	}
	fresh := NewRecordSizes(cl)
	if err := fresh.Measure(ctx(t), []string{"t", "empty"}); err != nil {
		t.Fatal(err)
	}
	got, ok := fresh.Charged("t", "legacy")
	if !ok || got < 0.9*want || got > 1.1*want {
		t.Errorf("at its first reading: %.1f B per record (%v), want within 10%% of the %.1f the watcher measured", got, ok, want)
	}
	if b, ok := fresh.PerRecord("empty"); ok {
		t.Errorf("a topic never written sized at %.1f B per record", b)
	}
}

// TestRecordSizesBusiest: the busiest producer's records per second over a
// span, from the last sequences the brokers describe: a known producer
// counts its sequence's growth, a new one (or a new epoch) that wrote
// since the last reading counts from sequence 0, a sequence that went
// back counts nothing; a span longer than the readings cover is the rate over what
// they cover; a failed reading forgets the producers.
func TestRecordSizesBusiest(t *testing.T) {
	describe := func(seqs map[int64][3]int32, at time.Time) kadm.DescribedProducersTopics {
		ps := kadm.DescribedProducers{}
		for id, s := range seqs { // s: partition, last sequence, epoch
			ps[id] = kadm.DescribedProducer{Topic: "t", Partition: s[0], ProducerID: id, ProducerEpoch: int16(s[2]), LastSequence: s[1], LastTimestamp: at.UnixMilli()}
		}
		parts := kadm.DescribedProducersPartitions{}
		for _, d := range ps {
			p := parts[d.Partition]
			if p.ActiveProducers == nil {
				p = kadm.DescribedProducersPartition{Topic: "t", Partition: d.Partition, ActiveProducers: kadm.DescribedProducers{}}
			}
			p.ActiveProducers[d.ProducerID] = d
			parts[d.Partition] = p
		}
		return kadm.DescribedProducersTopics{"t": {Topic: "t", Partitions: parts}}
	}
	r := &RecordSizes{producers: map[string]*producerState{}}
	t0 := time.Unix(1000, 0)
	// Readings BusiestSlack and a second apart: a span of a second then
	// covers the last reading only.
	step := BusiestSlack + time.Second
	read := func(n int, seqs map[int64][3]int32) {
		at := t0.Add(time.Duration(n) * step)
		r.readProducers("t", describe(seqs, at), nil, at.Add(-step), n > 0, at)
	}
	read(0, map[int64][3]int32{1: {0, 99}, 2: {1, 9}})
	if _, ok := r.Busiest("t", 11*time.Second); ok {
		t.Fatal("busiest known after one reading")
	}
	read(1, map[int64][3]int32{1: {0, 199}, 2: {1, 59}})             // 100 and 50
	read(2, map[int64][3]int32{1: {0, 219}, 2: {1, 59}, 3: {2, 99}}) // 20, 0 and a new one's 100
	if got, want := r.Busiest("t", 11*time.Second); got != 120/(2*step.Seconds()) || !want {
		t.Errorf("busiest over 2 readings: %v records/s, want 1's 120 over %s", got, 2*step)
	}
	if got, _ := r.Busiest("t", time.Second); got != 100 {
		t.Errorf("busiest over the last second: %v records/s, want 3's 100", got)
	}
	// Bytes stay in Kafka's window a little longer than its span: over a
	// span shorter than the readings' distance by less than
	// BusiestSlack, the reading before the last still counts.
	if got, _ := r.Busiest("t", step-time.Second); got != 120/(step-time.Second).Seconds() {
		t.Errorf("busiest over %s: %v records/s, want 1's 120 over it", step-time.Second, got)
	}
	read(3, map[int64][3]int32{1: {0, 5}, 2: {1, 59}, 3: {2, 99}}) // 1 went back: nothing
	if got, _ := r.Busiest("t", time.Second); got != 0 {
		t.Errorf("busiest over the last second, a sequence gone back: %v records/s, want 0", got)
	}
	read(4, map[int64][3]int32{1: {0, 5}, 2: {1, 39, 1}, 3: {2, 99}}) // 2's new epoch: 40 from 0
	if got, _ := r.Busiest("t", time.Second); got != 40 {
		t.Errorf("busiest over the last second, a new epoch: %v records/s, want 40", got)
	}
	r.readProducers("t", nil, errors.New("refused"), t0.Add(4*step), true, t0.Add(5*step))
	if _, ok := r.Busiest("t", 11*time.Second); ok {
		t.Error("busiest known after a failed reading")
	}
}
