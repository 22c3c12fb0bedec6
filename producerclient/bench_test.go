package producerclient

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkProduceThroughput produces many small records asynchronously
// into an in-process Kafka (kfake) through the raw franz-go client and
// through the SDK (default config: quota open, throttling and retry budget
// on, headers stamped), on identically configured clients, and reports
// records per second. Compare with
//
//	go test ./producerclient -run '^$' -bench ProduceThroughput -benchtime 500000x -count 5
//
// The broker runs in the same process, so both share the machine's cores
// with it; the ratio, not the absolute rate, is the figure.
func BenchmarkProduceThroughput(b *testing.B) {
	for _, size := range []int{32, 1024} {
		value := make([]byte, size)
		name := "32B"
		if size == 1024 {
			name = "1KiB"
		}
		b.Run(name, func(b *testing.B) { benchThroughput(b, value) })
	}
}

func benchThroughput(b *testing.B, value []byte) {
	run := func(b *testing.B, produce func(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error)), flush func(context.Context) error) {
		var failed atomic.Int64
		done := func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		}
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			produce(ctx, &kgo.Record{Topic: "bench", Value: value}, done)
		}
		if err := flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d records failed", n)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	}
	setup := func(b *testing.B) *kgo.Client {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.MaxBufferedRecords(100_000)},
			KafkaClientOpts(nil)...)...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		// Warm up: metadata, producer id.
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "bench", Value: value}).FirstErr(); err != nil {
			b.Fatal(err)
		}
		return cl
	}
	b.Run("raw", func(b *testing.B) {
		cl := setup(b)
		run(b, func(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error)) { cl.Produce(ctx, r, done) }, cl.Flush)
	})
	b.Run("sdk", func(b *testing.B) {
		cl := setup(b)
		p, err := NewKafka(cl, Config{Producer: "bench", MaxInFlight: 100_000})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		run(b, func(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error)) { p.ProduceAsync(ctx, r, done) }, p.Flush)
	})
}
