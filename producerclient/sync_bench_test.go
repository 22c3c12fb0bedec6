package producerclient

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkSyncProduce measures what a request handler that produces one
// record and waits sees, on clients with library defaults (franz-go's
// 10ms linger included):
//
//   - kafka-latency: per-call latency on kfake of franz-go's own
//     ProduceSync (raw), of the SDK's Produce (sdk), and of ProduceAsync
//     plus a wait for the callback (async-wait: what a synchronous call
//     costs when it lingers), called in turns so that a noisy neighbour
//     slows all of them alike. It reports each side's median µs per call
//     and sdk-raw-µs, the difference of the medians.
//
//   - nats-latency: the same for a JetStream publish on the embedded
//     nats-server: nats.go's PublishMsg (raw) and the SDK's Publish.
//
//     go test ./producerclient -run '^$' -bench 'SyncProduce' -benchtime 2000x
//
// The figures are reported, not asserted: they depend on the machine.
func BenchmarkSyncProduce(b *testing.B) {
	b.Run("kafka-latency", func(b *testing.B) {
		c := newKfake(b, 4, "sync")
		raw, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(raw.Close)
		p := newKafkaProducer(b, newKgo(b, c), Config{Producer: "bench"})
		ctx := context.Background()
		sides := []func() error{
			func() error { return raw.ProduceSync(ctx, &kgo.Record{Topic: "sync", Value: []byte("v")}).FirstErr() },
			func() error { return p.Produce(ctx, &kgo.Record{Topic: "sync", Value: []byte("v")}) },
			func() error {
				ch := make(chan error, 1)
				p.ProduceAsync(ctx, &kgo.Record{Topic: "sync", Value: []byte("v")}, func(_ *kgo.Record, err error) { ch <- err })
				return <-ch
			},
		}
		med := interleaveCalls(b, sides)
		b.ReportMetric(med[0], "raw-µs")
		b.ReportMetric(med[1], "sdk-µs")
		b.ReportMetric(med[2], "async-wait-µs")
		b.ReportMetric(med[1]-med[0], "sdk-raw-µs")
	})
	b.Run("nats-latency", func(b *testing.B) {
		_, _, js := startNATS(b)
		createStream(b, js, jetstream.StreamConfig{Name: "SYNC", Subjects: []string{"sync.>"}})
		p := newNATSProducer(b, js, Config{Producer: "bench"})
		ctx := context.Background()
		sides := []func() error{
			func() error {
				_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "sync.a", Data: []byte("v")})
				return err
			},
			func() error { _, err := p.Publish(ctx, &nats.Msg{Subject: "sync.a", Data: []byte("v")}); return err },
		}
		med := interleaveCalls(b, sides)
		b.ReportMetric(med[0], "raw-µs")
		b.ReportMetric(med[1], "sdk-µs")
		b.ReportMetric(med[1]-med[0], "sdk-raw-µs")
	})
}

// BenchmarkSyncOffer: 8 callers, each offered 250 records/s (2,000/s in
// all) for one second per iteration, each calling Produce and waiting, on
// kfake with library defaults; it reports delivered-%, the share of the
// offer acknowledged within the windows. A caller that falls behind its
// schedule sends at once until it has caught up; what it has not sent by
// the end of a window is not delivered. Reported, not asserted:
//
//	go test ./producerclient -run '^$' -bench 'SyncOffer' -benchtime 3x
func BenchmarkSyncOffer(b *testing.B) {
	c := newKfake(b, 4, "offer")
	p := newKafkaProducer(b, newKgo(b, c), Config{Producer: "bench"})
	if err := p.Produce(context.Background(), &kgo.Record{Topic: "offer"}); err != nil {
		b.Fatal(err) // warm up: metadata, producer id
	}
	for _, side := range []struct {
		name    string
		produce func(ctx context.Context) error
	}{
		// The SDK's synchronous call.
		{"produce", func(ctx context.Context) error {
			return p.Produce(ctx, &kgo.Record{Topic: "offer", Value: []byte("v")})
		}},
		// ProduceAsync and a wait for the callback: a call that lingers.
		{"async-wait", func(ctx context.Context) error {
			ch := make(chan error, 1)
			p.ProduceAsync(ctx, &kgo.Record{Topic: "offer", Value: []byte("v")}, func(_ *kgo.Record, err error) { ch <- err })
			return <-ch
		}},
	} {
		b.Run(side.name, func(b *testing.B) {
			const callers, perCaller = 8, 250 // records per second each
			var offered, delivered int64
			for range b.N {
				o, d := offer(side.produce, callers, perCaller, time.Second)
				offered += o
				delivered += d
			}
			b.ReportMetric(100*float64(delivered)/float64(offered), "delivered-%")
		})
	}
}

// interleaveCalls calls each side b.N times, in turns, and returns each
// side's median latency in µs.
func interleaveCalls(b *testing.B, sides []func() error) []float64 {
	b.Helper()
	for _, call := range sides { // warm up: metadata, producer id, stream lookup
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([][]time.Duration, len(sides))
	b.ResetTimer()
	for i := range b.N {
		for k := range sides {
			j := (k + i) % len(sides)
			start := time.Now()
			if err := sides[j](); err != nil {
				b.Fatal(err)
			}
			lat[j] = append(lat[j], time.Since(start))
		}
	}
	b.StopTimer()
	med := make([]float64, len(sides))
	for j, l := range lat {
		slices.Sort(l)
		med[j] = float64(l[len(l)/2].Nanoseconds()) / 1e3
	}
	return med
}

// offer runs callers goroutines, each offered rate records per second for
// window and producing each with produce, which waits for the outcome; it returns the records offered
// and those acknowledged within the window.
func offer(produce func(context.Context) error, callers, rate int, window time.Duration) (offered, delivered int64) {
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	start := time.Now()
	every := time.Second / time.Duration(rate)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Callers are spread over the period, as requests would be.
			next := start.Add(every * time.Duration(i) / time.Duration(callers))
			for {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				if ctx.Err() != nil {
					return
				}
				if produce(ctx) == nil && ctx.Err() == nil {
					ok.Add(1)
				}
				next = next.Add(every)
			}
		}()
	}
	wg.Wait()
	return int64(callers) * int64(rate) * int64(window/time.Millisecond) / 1000, ok.Load()
}
