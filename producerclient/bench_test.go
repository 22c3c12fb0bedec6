package producerclient

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
		b.Run(name, func(b *testing.B) { benchThroughput(b, value, "") })
	}
}

// BenchmarkProduceThroughputRealKafka is the same comparison against a real
// broker over loopback (LAGBRIDGE_KAFKA_BOOTSTRAP, as make test starts it):
// there the broker is another process and the SDK's per-record CPU is not
// taken from the broker's share of the cores, as it is with kfake in-process.
func BenchmarkProduceThroughputRealKafka(b *testing.B) {
	addr := os.Getenv("LAGBRIDGE_KAFKA_BOOTSTRAP")
	if addr == "" {
		b.Skip("LAGBRIDGE_KAFKA_BOOTSTRAP not set (make kafka-up)")
	}
	for _, size := range []int{32, 1024} {
		value := make([]byte, size)
		name := "32B"
		if size == 1024 {
			name = "1KiB"
		}
		b.Run(name, func(b *testing.B) { benchThroughput(b, value, addr) })
	}
}

func benchThroughput(b *testing.B, value []byte, realAddr string) {
	run := func(b *testing.B, topic string, produce func(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error)), flush func(context.Context) error) {
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
			produce(ctx, &kgo.Record{Topic: topic, Value: value}, done)
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
	// setup returns a client of kfake (realAddr empty) or of the real
	// broker, and a topic with four partitions on it.
	setup := func(b *testing.B, sdk bool) (*kgo.Client, string) {
		seeds, topic := []string{realAddr}, "bench"
		if realAddr == "" {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(c.Close)
			seeds = c.ListenAddrs()
		} else {
			topic = fmt.Sprintf("bench-%d", time.Now().UnixNano())
			adm, err := kgo.NewClient(kgo.SeedBrokers(realAddr))
			if err != nil {
				b.Fatal(err)
			}
			defer adm.Close()
			ka := kadm.NewClient(adm)
			if _, err := ka.CreateTopic(context.Background(), 4, 1, nil, topic); err != nil {
				b.Fatal(err)
			}
			// Time nothing until every partition has a leader.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				td, err := ka.ListTopics(context.Background(), topic)
				ready := err == nil && td[topic].Err == nil && len(td[topic].Partitions) == 4
				for _, p := range td[topic].Partitions {
					ready = ready && p.Err == nil && p.Leader >= 0
				}
				if ready {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("topic %s has no leaders after 30s", topic)
				}
			}
		}
		opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MaxBufferedRecords(100_000)}
		if sdk {
			// The SDK owns retries; the raw client keeps franz-go's.
			opts = append(opts, KafkaClientOpts(nil)...)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		// Warm up: metadata, producer id; a topic just created on the
		// real broker may not have leaders yet, and this client does not
		// retry records (the SDK does), so try for a while.
		for deadline := time.Now().Add(30 * time.Second); ; {
			err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: value}).FirstErr()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return cl, topic
	}
	b.Run("raw", func(b *testing.B) {
		cl, topic := setup(b, false)
		run(b, topic, func(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error)) { cl.Produce(ctx, r, done) }, cl.Flush)
	})
	b.Run("sdk", func(b *testing.B) {
		cl, topic := setup(b, true)
		p, err := NewKafka(cl, Config{Producer: "bench", MaxInFlight: 100_000})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		run(b, topic, func(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error)) { p.ProduceAsync(ctx, r, done) }, p.Flush)
	})
}
