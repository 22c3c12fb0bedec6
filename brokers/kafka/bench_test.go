package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkObserve measures one cycle against a 3-broker kfake cluster.
// Each group commits on two topics at offsets 0..3 of 3 records per
// partition, so a cycle reports groups*2 samples of `partitions` partitions
// each, and most partitions have a head to read.
//
//   - warm: offsets do not move between cycles, so heads come from the cache
//     and no Fetch is sent: the steady state of idle consumers.
//   - cold: the head cache is emptied before each cycle, so every partition
//     is fetched (one Fetch per broker): the worst case, every group moved.
//
// kfake runs in this process on the same cores, so ns/op includes the
// broker's work and B/op its allocations. The 10,000-partition size is
// skipped with -short (its setup takes several seconds).
func BenchmarkObserve(b *testing.B) {
	sizes := []struct {
		topics, partitions, groups int
		short                      bool
	}{
		{10, 10, 100, true},
		{100, 100, 1000, false},
	}
	for _, sz := range sizes {
		name := fmt.Sprintf("partitions=%d/groups=%d", sz.topics*sz.partitions, sz.groups)
		b.Run(name, func(b *testing.B) {
			if testing.Short() && !sz.short {
				b.Skip("setup of the large cluster skipped with -short")
			}
			o, fetches := benchCluster(b, sz.topics, int32(sz.partitions), sz.groups)
			ctx := context.Background()
			if _, err := o.Observe(ctx); err != nil { // warm the cache and connections
				b.Fatal(err)
			}
			for _, mode := range []string{"warm", "cold"} {
				b.Run(mode, func(b *testing.B) {
					b.ReportAllocs()
					f0 := fetches.Load()
					var parts int
					for b.Loop() {
						if mode == "cold" {
							clear(o.heads)
						}
						got, err := o.Observe(ctx)
						if err != nil {
							b.Fatal(err)
						}
						parts = 0
						for _, s := range got {
							parts += len(s.Partitions)
						}
					}
					b.ReportMetric(float64(parts), "partition-samples/op")
					b.ReportMetric(float64(fetches.Load()-f0)/float64(b.N), "fetches/op")
				})
			}
		})
	}
}

func benchCluster(b testing.TB, topics int, partitions int32, groups int) (*Observer, interface{ Load() int64 }) {
	b.Helper()
	start := time.Now()
	c := newCluster(b, kfake.NumBrokers(3))
	cl := newClient(b, c, kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20))
	adm := kadm.NewClient(cl)
	ctx := context.Background()

	names := make([]string, topics)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%03d", i)
	}
	resp, err := adm.CreateTopics(ctx, partitions, 1, nil, names...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		b.Fatal(err)
	}
	var recs []*kgo.Record
	for _, t := range names {
		for p := range partitions {
			for i := range 3 {
				recs = append(recs, rec(t, p, i, "v"))
			}
		}
	}
	produce(b, cl, recs...)

	// Commits in parallel, one request per group.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for g := w; g < groups; g += 4 {
				os := make(kadm.Offsets)
				for _, t := range []string{names[g%topics], names[(g*7+3)%topics]} {
					for p := range partitions {
						os.Add(kadm.Offset{Topic: t, Partition: p, At: int64(g % 4), LeaderEpoch: -1})
					}
				}
				if err := adm.CommitAllOffsets(ctx, fmt.Sprintf("bench-group-%04d", g), os); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	fetches := countRequests(c, kmsg.Fetch)
	o := newObserver(b, c, func(cfg *Config) { cfg.RequestTimeout = 30 * time.Second })
	b.Logf("setup: %d topics x %d partitions, %d groups in %v", topics, partitions, groups, time.Since(start).Round(time.Millisecond))
	return o, fetches
}
