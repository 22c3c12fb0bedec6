package producerclient

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkProduceThroughput produces many small records asynchronously
// into an in-process Kafka (kfake), in chunks of 100: through the raw
// franz-go client (raw: Produce per record), through the SDK (default
// config: quota open, throttling and retry budget on, headers stamped) one
// record per call (sdk: ProduceAsync) and one chunk per call (sdk-batch:
// ProduceBatchAsync), on identically configured clients, and reports
// records per second. The interleaved sub-benchmark runs the sides in
// turns in one process (with raw-hdr too: the raw client producing the
// header the SDK writes for a non-default criticality) and reports the
// ratios; on a shared machine it is the figure to quote:
//
//	go test ./producerclient -run '^$' -bench 'ProduceThroughput$/.*/interleaved' -benchtime 2000000x -count 5
//
// The broker runs in the same process, so every side shares the machine's
// cores with it; the ratio, not the absolute rate, is the figure.
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

// benchChunk is how many records each side produces per call round: the
// raw client and the SDK's ProduceAsync loop over the chunk, the SDK's
// ProduceBatchAsync takes it in one call.
const benchChunk = 100

func benchThroughput(b *testing.B, value []byte, realAddr string) {
	type produceFn func(ctx context.Context, rs []*kgo.Record, done func(*kgo.Record, error))
	// produceN produces n records in chunks and waits for all of them; it
	// returns how many failed.
	produceN := func(b *testing.B, topic string, n int, produce produceFn, flush func(context.Context) error) int64 {
		var failed atomic.Int64
		done := func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		}
		ctx := context.Background()
		chunk := make([]*kgo.Record, benchChunk)
		for i := 0; i < n; i += benchChunk {
			rs := chunk[:min(benchChunk, n-i)]
			for j := range rs {
				rs[j] = &kgo.Record{Topic: topic, Value: value}
			}
			produce(ctx, rs, done)
		}
		if err := flush(ctx); err != nil {
			b.Fatal(err)
		}
		return failed.Load()
	}
	run := func(b *testing.B, topic string, produce produceFn, flush func(context.Context) error) {
		b.ReportAllocs()
		b.ResetTimer()
		failed := produceN(b, topic, b.N, produce, flush)
		b.StopTimer()
		if failed > 0 {
			b.Fatalf("%d records failed", failed)
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
	type side struct {
		topic   string
		produce produceFn
		flush   func(context.Context) error
	}
	raw := func(b *testing.B) side {
		cl, topic := setup(b, false)
		return side{topic, func(ctx context.Context, rs []*kgo.Record, done func(*kgo.Record, error)) {
			for _, r := range rs {
				cl.Produce(ctx, r, done)
			}
		}, cl.Flush}
	}
	sdkProducer := func(b *testing.B) (*KafkaProducer, string) {
		cl, topic := setup(b, true)
		p, err := NewKafka(cl, Config{Producer: "bench", MaxInFlight: 100_000})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close() })
		return p, topic
	}
	sdk := func(b *testing.B) side {
		p, topic := sdkProducer(b)
		return side{topic, func(ctx context.Context, rs []*kgo.Record, done func(*kgo.Record, error)) {
			for _, r := range rs {
				p.ProduceAsync(ctx, r, done)
			}
		}, p.Flush}
	}
	batch := func(b *testing.B) side {
		p, topic := sdkProducer(b)
		return side{topic, func(ctx context.Context, rs []*kgo.Record, done func(*kgo.Record, error)) {
			p.ProduceBatchAsync(ctx, rs, done)
		}, p.Flush}
	}
	for _, sd := range []struct {
		name string
		mk   func(*testing.B) side
	}{{"raw", raw}, {"sdk", sdk}, {"sdk-batch", batch}} {
		b.Run(sd.name, func(b *testing.B) {
			s := sd.mk(b)
			run(b, s.topic, s.produce, s.flush)
		})
	}
	// rawHdr is the raw client producing records that carry the header
	// the SDK stamps for a criticality other than the default
	// (lagbridge-criticality: SHEDDABLE): the cost of the header itself,
	// in franz-go's encoder and in the broker, which the SDK's default
	// traffic does not pay.
	rawHdr := func(b *testing.B) side {
		s := raw(b)
		produce := s.produce
		s.produce = func(ctx context.Context, rs []*kgo.Record, done func(*kgo.Record, error)) {
			for _, r := range rs {
				r.Headers = critOnly[Sheddable][:1:1]
			}
			produce(ctx, rs, done)
		}
		return s
	}
	// interleaved runs the sides (raw, raw with the SDK's header, sdk,
	// sdk-batch) in turns of slice records each, in a rotating order, so
	// that a noisy neighbour on a shared machine slows all of them alike.
	// It reports each side's ns per record over the whole run and, as the
	// figure to quote, the median over the rounds of each side's
	// throughput as a percentage of raw's in the same round: a burst of
	// noise spoils a round or two, not the median. ns/op is the sum over
	// the sides.
	b.Run("interleaved", func(b *testing.B) {
		sides := []side{raw(b), rawHdr(b), sdk(b), batch(b)}
		names := []string{"raw", "rawhdr", "sdk", "batch"}
		const slice = 20_000
		var spent [4]time.Duration
		var rounds [4][]time.Duration
		b.ResetTimer()
		for i, round := 0, 0; i < b.N; i, round = i+slice, round+1 {
			n := min(slice, b.N-i)
			for k := range sides {
				j := (k + round) % len(sides)
				start := time.Now()
				if failed := produceN(b, sides[j].topic, n, sides[j].produce, sides[j].flush); failed > 0 {
					b.Fatalf("%d records failed", failed)
				}
				d := time.Since(start)
				spent[j] += d
				if n == slice {
					rounds[j] = append(rounds[j], d)
				}
			}
		}
		b.StopTimer()
		per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
		for i, name := range names {
			b.ReportMetric(per(spent[i]), name+"-ns/rec")
			if i > 0 && len(rounds[i]) > 0 {
				ratios := make([]float64, len(rounds[i]))
				for r := range ratios {
					ratios[r] = float64(rounds[0][r]) / float64(rounds[i][r])
				}
				slices.Sort(ratios)
				b.ReportMetric(100*ratios[len(ratios)/2], name+"/raw-%")
			}
		}
	})
}
