package kafka

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/lag"
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
// broker=inproc runs kfake in this process on the same cores, so ns/op
// includes the broker's work and B/op its allocations (most of them: the
// broker builds the answers). broker=process runs the same cluster in a
// child process (this test binary, see TestMain), as a real broker runs, so
// B/op is the observer's alone; ns/op still shares the two cores with the
// broker. sample-B/op is the size of the samples a cycle returns (their
// structs and partition slices, counted from what Observe returned, not
// measured), beyond-B/op is B/op minus sample-B/op: what the observer
// allocates for its own work. The 10,000-partition size is skipped with
// -short (its setup takes several seconds).
func BenchmarkObserve(b *testing.B) {
	sizes := []struct {
		topics, partitions, groups int
		short                      bool
	}{
		{10, 10, 100, true},
		{100, 100, 1000, false},
	}
	for _, sz := range sizes {
		for _, broker := range []string{"inproc", "process"} {
			name := fmt.Sprintf("partitions=%d/groups=%d/broker=%s", sz.topics*sz.partitions, sz.groups, broker)
			b.Run(name, func(b *testing.B) {
				if testing.Short() && !sz.short {
					b.Skip("setup of the large cluster skipped with -short")
				}
				var (
					o       *Observer
					fetches interface{ Load() int64 }
				)
				if broker == "inproc" {
					o, fetches = benchCluster(b, sz.topics, int32(sz.partitions), sz.groups)
				} else {
					o = benchProcess(b, sz.topics, sz.partitions, sz.groups)
				}
				benchObserve(b, o, fetches)
			})
		}
	}
}

// benchObserve runs the warm and cold cycles of BenchmarkObserve; fetches
// counts the broker's Fetch requests when it runs in this process.
func benchObserve(b *testing.B, o *Observer, fetches interface{ Load() int64 }) {
	ctx := context.Background()
	if _, err := o.Observe(ctx); err != nil { // warm the cache and connections
		b.Fatal(err)
	}
	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			var f0 int64
			if fetches != nil {
				f0 = fetches.Load()
			}
			var (
				parts, sampleBytes int
				ms                 runtime.MemStats
			)
			runtime.ReadMemStats(&ms)
			alloc0 := ms.TotalAlloc
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
				sampleBytes = cap(got)*int(unsafe.Sizeof(lag.Sample{})) + parts*int(unsafe.Sizeof(lag.PartitionSample{}))
			}
			runtime.ReadMemStats(&ms)
			perOp := float64(ms.TotalAlloc-alloc0) / float64(b.N)
			b.ReportMetric(float64(parts), "partition-samples/op")
			b.ReportMetric(float64(sampleBytes), "sample-B/op")
			b.ReportMetric(perOp-float64(sampleBytes), "beyond-B/op")
			if fetches != nil {
				b.ReportMetric(float64(fetches.Load()-f0)/float64(b.N), "fetches/op")
			}
		})
	}
}

// benchBrokerEnv, set to "topics,partitions,groups", makes the test binary
// serve BenchmarkObserve's cluster instead of running tests: it prints the
// brokers' addresses on a line and serves until its stdin closes.
const benchBrokerEnv = "LAGBRIDGE_BENCH_BROKER"

// serveBenchBroker is the child process of broker=process.
func serveBenchBroker(spec string) int {
	var topics, partitions, groups int
	if _, err := fmt.Sscanf(spec, "%d,%d,%d", &topics, &partitions, &groups); err != nil {
		fmt.Fprintln(os.Stderr, "bad", benchBrokerEnv, err)
		return 2
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if err := seedBench(c, topics, int32(partitions), groups); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(strings.Join(c.ListenAddrs(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// benchProcess starts BenchmarkObserve's cluster in a child process and
// returns an observer of it; the child stops with the benchmark.
func benchProcess(b *testing.B, topics, partitions, groups int) *Observer {
	b.Helper()
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d,%d", benchBrokerEnv, topics, partitions, groups))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("bench broker: %v", err)
	}
	cfg := Config{Cluster: "bench", Brokers: strings.Split(strings.TrimSpace(line), ","), RequestTimeout: 30 * time.Second}
	o, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(o.Close)
	b.Logf("setup: %d topics x %d partitions, %d groups in a child process in %v", topics, partitions, groups, time.Since(start).Round(time.Millisecond))
	return o
}

func benchCluster(b testing.TB, topics int, partitions int32, groups int) (*Observer, interface{ Load() int64 }) {
	b.Helper()
	start := time.Now()
	c := newCluster(b, kfake.NumBrokers(3))
	if err := seedBench(c, topics, partitions, groups); err != nil {
		b.Fatal(err)
	}
	fetches := countRequests(c, kmsg.Fetch)
	o := newObserver(b, c, func(cfg *Config) { cfg.RequestTimeout = 30 * time.Second })
	b.Logf("setup: %d topics x %d partitions, %d groups in %v", topics, partitions, groups, time.Since(start).Round(time.Millisecond))
	return o, fetches
}

// seedBench creates BenchmarkObserve's topics, records and commits in c.
func seedBench(c *kfake.Cluster, topics int, partitions int32, groups int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
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
		return err
	}
	var recs []*kgo.Record
	for _, t := range names {
		for p := range partitions {
			for i := range 3 {
				recs = append(recs, rec(t, p, i, "v"))
			}
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return err
	}

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
	return <-errs
}
