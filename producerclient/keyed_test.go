package producerclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// TestKafkaKeyedAvoidedPartition: under a lease that says to avoid
// partition 1 of four, a keyed record whose key sends it there is refused
// at once with SignalAvoidPartitions and a *PartitionBusyError naming
// partition 1, whichever call sends it; every other keyed record lands
// where a plain franz-go client puts it, and keyless records are never
// refused (they go around partition 1). An advisory lease, or one without
// the list, refuses nothing.
func TestKafkaKeyedAvoidedPartition(t *testing.T) {
	type outcome struct {
		r   *kgo.Record
		err error
	}
	sends := []struct {
		name string
		send func(ctx context.Context, p *KafkaProducer, rs []*kgo.Record) []outcome
	}{
		{"Produce", func(ctx context.Context, p *KafkaProducer, rs []*kgo.Record) []outcome {
			var out []outcome
			for _, r := range rs {
				out = append(out, outcome{r, p.Produce(ctx, r)})
			}
			return out
		}},
		{"ProduceAsync", func(ctx context.Context, p *KafkaProducer, rs []*kgo.Record) []outcome {
			var (
				mu  sync.Mutex
				wg  sync.WaitGroup
				out []outcome
			)
			for _, r := range rs {
				wg.Add(1)
				ret := p.ProduceAsync(ctx, r, func(r *kgo.Record, err error) {
					mu.Lock()
					out = append(out, outcome{r, err})
					mu.Unlock()
					wg.Done()
				})
				var busy *PartitionBusyError
				if ret != nil && !errors.As(ret, &busy) {
					t.Errorf("ProduceAsync returned %v", ret)
				}
			}
			wg.Wait()
			return out
		}},
		{"ProduceBatch", func(ctx context.Context, p *KafkaProducer, rs []*kgo.Record) []outcome {
			var out []outcome
			for _, res := range p.ProduceBatch(ctx, rs) {
				out = append(out, outcome{res.Record, res.Err})
			}
			return out
		}},
	}
	leases := []struct {
		name   string
		lease  quotaproto.Lease
		refuse bool
	}{
		{"avoid partition 1", quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: []int32{1}, Version: 1}, true},
		{"advisory", quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: []int32{1}, Advisory: true, Version: 1}, false},
		{"no list", quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalOK, Version: 1}, false},
	}
	for _, s := range sends {
		for _, l := range leases {
			t.Run(s.name+"/"+l.name, func(t *testing.T) {
				c := newKfake(t, 4, "orders")
				ctx := ctxFor(t, 20*time.Second)
				// Where a plain client puts each key.
				plain := newKgo(t, c)
				want := map[string]int32{}
				var rs []*kgo.Record
				for i := range 24 {
					key := fmt.Sprintf("key-%d", i)
					r := &kgo.Record{Topic: "orders", Key: []byte(key)}
					if err := plain.ProduceSync(ctx, r).FirstErr(); err != nil {
						t.Fatal(err)
					}
					want[key] = r.Partition
					rs = append(rs, &kgo.Record{Topic: "orders", Key: []byte(key)}, &kgo.Record{Topic: "orders", Value: []byte(key)})
				}
				p := newKafkaProducer(t, newKgo(t, c), Config{})
				// The producer's client loads the topic's metadata with its
				// first record (before that, keys cannot be placed ahead).
				if err := p.Produce(ctx, &kgo.Record{Topic: "orders"}); err != nil {
					t.Fatal(err)
				}
				setLease(t, p.c, l.lease)
				refused := 0
				for _, o := range s.send(ctx, p, rs) {
					if o.r.Key == nil {
						switch {
						case o.err != nil:
							t.Errorf("keyless record refused: %v", o.err)
						case l.refuse && o.r.Partition == 1:
							t.Errorf("keyless record on avoided partition 1")
						}
						continue
					}
					bound := want[string(o.r.Key)]
					if !l.refuse || bound != 1 {
						if o.err != nil || o.r.Partition != bound {
							t.Errorf("key %s: partition %d, %v; a plain client puts it on %d", o.r.Key, o.r.Partition, o.err, bound)
						}
						continue
					}
					refused++
					var busy *PartitionBusyError
					var rej *RejectError
					switch {
					case !errors.Is(o.err, ErrAvoidPartitions) || errors.Is(o.err, ErrSlowDown) || errors.Is(o.err, ErrStop):
						t.Errorf("key %s bound for 1: %v, want avoid-partitions only", o.r.Key, o.err)
					case !errors.As(o.err, &busy) || busy.Topic != "orders" || busy.Partition != 1:
						t.Errorf("key %s: %v, want a PartitionBusyError for orders/1", o.r.Key, o.err)
					case !errors.As(o.err, &rej) || rej.Record != o.r || rej.Attempts != 0 || rej.Signal != SignalAvoidPartitions:
						t.Errorf("key %s: %+v, want the record handed back unsent", o.r.Key, rej)
					}
				}
				if l.refuse && refused == 0 {
					t.Fatalf("no key of %v sent to partition 1: the case tests nothing", want)
				}
				if got := p.Stats().Topics["orders"].Rejected["partition"]; got != uint64(refused) {
					t.Errorf("counted %d refusals for a partition, want %d", got, refused)
				}
			})
		}
	}
}

// TestPartitionBusyError pins the error's contract on its own and wrapped.
func TestPartitionBusyError(t *testing.T) {
	e := &PartitionBusyError{Topic: "orders", Partition: 3}
	rej := reject("orders", SignalAvoidPartitions, nil, "late", 0, e)
	for name, err := range map[string]error{"plain": e, "wrapped": fmt.Errorf("send: %w", e), "in a RejectError": rej} {
		var got *PartitionBusyError
		if !errors.Is(err, ErrAvoidPartitions) || !errors.As(err, &got) || got.Partition != 3 || got.Topic != "orders" {
			t.Errorf("%s: %v does not match ErrAvoidPartitions and a PartitionBusyError for orders/3", name, err)
		}
	}
}

// TestKafkaKeylessRunsBounded: franz-go's default partitioner keeps small
// keyless records on one partition until 64 KiB went to it; through the
// SDK a run lasts at most maxRun of the records' timestamps, so records
// produced over a second spread over the partitions in runs of at most
// maxRun. A plain client keeps them on one partition (what makes the
// check able to fail).
func TestKafkaKeylessRunsBounded(t *testing.T) {
	c := newKfake(t, 4, "orders")
	ctx := ctxFor(t, 20*time.Second)
	t0 := time.Now()
	records := func() []*kgo.Record {
		var rs []*kgo.Record
		for i := range 200 {
			rs = append(rs, &kgo.Record{Topic: "orders", Value: []byte("x"), Timestamp: t0.Add(time.Duration(i) * 5 * time.Millisecond)})
		}
		return rs
	}
	cases := []struct {
		name string
		send func(r *kgo.Record) error
		// runs: at least this many runs, each at most maxRun long.
		bounded bool
	}{
		{"through the SDK", func() func(*kgo.Record) error {
			p := newKafkaProducer(t, newKgo(t, c), Config{})
			return func(r *kgo.Record) error { return p.Produce(ctx, r) }
		}(), true},
		{"a plain client", func() func(*kgo.Record) error {
			cl := newKgo(t, c)
			return func(r *kgo.Record) error { return cl.ProduceSync(ctx, r).FirstErr() }
		}(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runs, longest := 0, time.Duration(0)
			var start time.Time
			last := int32(-1)
			for _, r := range records() {
				if err := tc.send(r); err != nil {
					t.Fatal(err)
				}
				if r.Partition != last {
					runs, start, last = runs+1, r.Timestamp, r.Partition
				}
				longest = max(longest, r.Timestamp.Sub(start))
			}
			t.Logf("%d runs, the longest %s", runs, longest)
			switch {
			case tc.bounded && (runs < 5 || longest >= maxRun):
				t.Errorf("%d runs, the longest %s: want runs of less than %s", runs, longest, maxRun)
			case !tc.bounded && runs != 1:
				t.Errorf("a plain client made %d runs: the default partitioner no longer sticks, the case tests nothing", runs)
			}
		})
	}
}

// TestKafkaKeylessRunsCycle: through the SDK, keyless runs go through
// the partitions in a cycle, so a partition gets one run in every n (here
// 4): records produced over two seconds in runs of maxRun never put two
// runs on one partition with fewer than n-1 runs on others between them.
// Drawn at random, the run after next went back to the same partition one
// time in n-1, and a partition whose consumer had just slowed down took
// two runs within 0.3 s, before the daemon could list it.
func TestKafkaKeylessRunsCycle(t *testing.T) {
	c := newKfake(t, 4, "orders")
	ctx := ctxFor(t, 20*time.Second)
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	t0 := time.Now()
	var runs []int32
	for i := range 400 {
		r := &kgo.Record{Topic: "orders", Value: []byte("x"), Timestamp: t0.Add(time.Duration(i) * 5 * time.Millisecond)}
		if err := p.Produce(ctx, r); err != nil {
			t.Fatal(err)
		}
		if len(runs) == 0 || runs[len(runs)-1] != r.Partition {
			runs = append(runs, r.Partition)
		}
	}
	t.Logf("%d runs: %v", len(runs), runs)
	if len(runs) < 10 {
		t.Fatalf("%d runs: want at least 10, the case tests nothing", len(runs))
	}
	for k := 1; k < len(runs); k++ {
		for j := max(k-3, 0); j < k; j++ {
			if runs[j] == runs[k] {
				t.Errorf("runs %d and %d both on partition %d: want 3 runs on other partitions between", j, k, runs[k])
			}
		}
	}
}

// TestKafkaKeylessRunsSmooth: through the SDK, a partition gets its
// keyless records in runs short enough that no 0.7 s of them holds much
// more than its even share: 300 msg/s over six partitions (50 msg/s each,
// 35 in 0.7 s), at most 1.5 times that. 0.7 s is about what a partition
// whose consumer just slowed takes to be listed at a 250 ms interval
// (two readings, and the lease's push). In runs of 100 ms, one 0.7 s
// held two whole runs, 60 records, on one partition: on one drained at
// 20 msg/s the second run's last 8 records wait more than 2 s (lagbridge
// bench --hot-partition --hot-interval 250ms --hot-slow-after 10s on
// kfake: 11 of partition 0's records dead, all created 0.66-0.70 s after
// its slowdown, its listing at 0.85 s).
func TestKafkaKeylessRunsSmooth(t *testing.T) {
	const (
		n      = 6
		rate   = 300.0
		window = 700 * time.Millisecond
	)
	c := newKfake(t, n, "orders")
	ctx := ctxFor(t, 30*time.Second)
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	t0 := time.Now()
	var at [n][]time.Time
	for i := range 900 {
		r := &kgo.Record{Topic: "orders", Value: []byte("x"), Timestamp: t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))}
		if err := p.Produce(ctx, r); err != nil {
			t.Fatal(err)
		}
		at[r.Partition] = append(at[r.Partition], r.Timestamp)
	}
	limit := 1.5 * rate / n * window.Seconds()
	for part, ts := range at {
		most := 0
		for i := range ts {
			j := i
			for j < len(ts) && ts[j].Sub(ts[i]) < window {
				j++
			}
			most = max(most, j-i)
		}
		t.Logf("partition %d: %d records, at most %d in %s", part, len(ts), most, window)
		if float64(most) > limit {
			t.Errorf("partition %d got %d records within %s, want at most %.0f (1.5 times its even share)", part, most, window, limit)
		}
	}
}

// TestQuotaAvoidPartitionsIsACopy: the list Quota returns is the
// caller's: changing it does not change which partitions the producer
// avoids (it is read concurrently by every record's placement).
func TestQuotaAvoidPartitionsIsACopy(t *testing.T) {
	c := newKfake(t, 4, "orders")
	ctx := ctxFor(t, 20*time.Second)
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	if err := p.Produce(ctx, &kgo.Record{Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	setLease(t, p.c, quotaproto.Lease{Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: []int32{1}, Version: 1})
	q, ok := p.Quota("orders")
	if !ok || !slices.Equal(q.AvoidPartitions, []int32{1}) {
		t.Fatalf("quota %+v, %v: want partition 1 avoided", q, ok)
	}
	q.AvoidPartitions[0] = 3
	if q, _ := p.Quota("orders"); !slices.Equal(q.AvoidPartitions, []int32{1}) {
		t.Errorf("after the caller changed its copy, the producer avoids %v, want [1]", q.AvoidPartitions)
	}
}

// TestKafkaAvoidPartitionsShare: an avoided partition with a share in the
// lease (protocol 1.1) gets that share of the keyless records, one record
// at a time, instead of none; an avoided partition without one gets
// none, and shares that do not apply (a partition not avoided, a share
// out of (0, 1]) are dropped. Keyed records bound for the shared
// partition go with probability share x partitions (TestKafkaKeyedShare).
func TestKafkaAvoidPartitionsShare(t *testing.T) {
	c := newKfake(t, 4, "orders")
	ctx := ctxFor(t, 60*time.Second)
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	setLease(t, p.c, quotaproto.Lease{
		Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: []int32{0, 2}, Version: 1,
		PartitionShares: []quotaproto.PartitionShare{{Partition: 0, Share: 0.1}, {Partition: 1, Share: 0.2}, {Partition: 2, Share: 1.5}},
	})
	q, _ := p.Quota("orders")
	if want := []quotaproto.PartitionShare{{Partition: 0, Share: 0.1}}; !slices.Equal(q.PartitionShares, want) {
		t.Fatalf("quota's shares %v, want %v", q.PartitionShares, want)
	}
	const n = 1000
	t0 := time.Now()
	counts := map[int32]int{}
	for i := range n {
		r := &kgo.Record{Topic: "orders", Value: []byte("x"), Timestamp: t0.Add(time.Duration(i) * 5 * time.Millisecond)}
		if err := p.Produce(ctx, r); err != nil {
			t.Fatal(err)
		}
		counts[r.Partition]++
	}
	t.Logf("keyless records by partition: %v", counts)
	// Binomial(1000, 0.1): 100 expected, a standard deviation of 9.5.
	if counts[0] < 60 || counts[0] > 140 || counts[2] != 0 {
		t.Fatalf("keyless records by partition: %v, want about %d on 0 and none on 2", counts, n/10)
	}
}

// TestKafkaKeyedShare: a keyed record bound for an avoided partition that
// the lease gives a share goes anyway with probability share x partitions
// (0.1 x 4 here), alone or in a batch; the rest are refused for that
// partition alone. Without the share every one is refused
// (TestKafkaKeyedAvoidedPartition).
func TestKafkaKeyedShare(t *testing.T) {
	c := newKfake(t, 4, "orders")
	ctx := ctxFor(t, 60*time.Second)
	p := newKafkaProducer(t, newKgo(t, c), Config{})
	setLease(t, p.c, quotaproto.Lease{
		Topic: "orders", Signal: quotaproto.SignalAvoidPartitions, AvoidPartitions: []int32{0}, Version: 1,
		PartitionShares: []quotaproto.PartitionShare{{Partition: 0, Share: 0.1}},
	})
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch %v", batch), func(t *testing.T) {
			var rs []*kgo.Record
			for i := range 1200 {
				rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "k-%v-%d", batch, i), Value: []byte("x")})
			}
			errs := make([]error, len(rs))
			if batch {
				res := p.ProduceBatch(ctx, rs)
				for i := range res {
					errs[i] = res[i].Err
				}
			} else {
				for i, r := range rs {
					errs[i] = p.Produce(ctx, r)
				}
			}
			sent, refused := 0, 0
			for i, err := range errs {
				var busy *PartitionBusyError
				switch {
				case errors.As(err, &busy) && busy.Partition == 0:
					refused++
				case err != nil:
					t.Fatalf("record %d: %v", i, err)
				case rs[i].Partition == 0:
					sent++
				}
			}
			frac := float64(sent) / float64(sent+refused)
			t.Logf("bound for partition 0: %d sent, %d refused (%.2f)", sent, refused, frac)
			// About 300 bound for it, 40% let through: 0.4 +- 0.03.
			if sent+refused < 200 || frac < 0.25 || frac > 0.55 {
				t.Fatalf("bound for partition 0: %d sent, %d refused, want about 40%% sent", sent, refused)
			}
		})
	}
}
