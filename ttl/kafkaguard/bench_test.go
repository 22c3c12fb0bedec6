package kafkaguard

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/ttl"
	"github.com/lagbridge/lagbridge/ttl/ttlmetrics"
)

var sink int

func handler(_ context.Context, r *kgo.Record) error {
	sink += len(r.Value)
	return nil
}

// benchBatch is a fetch-sized batch of live records; withDeadline adds a
// lagbridge-deadline header an hour ahead of the real clock.
func benchBatch(n int, withDeadline bool) []*kgo.Record {
	now := time.Now()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "orders", Offset: int64(i), Timestamp: now, Value: []byte("payload")}
		if withDeadline {
			recs[i].Headers = []kgo.RecordHeader{
				{Key: "trace-id", Value: []byte("abc")},
				{Key: ttl.HeaderDeadline, Value: []byte(ttl.FormatDeadline(now.Add(time.Hour)))},
				{Key: ttl.HeaderCriticality, Value: []byte("CRITICAL")},
			}
		}
	}
	return recs
}

// BenchmarkPerRecord reports the cost per live record (ns/op and
// allocs/op are per record): the handler called directly, and through the
// guard in its configurations. The guard's overhead is the difference
// to "direct".
func BenchmarkPerRecord(b *testing.B) {
	const n = 100
	m, err := ttlmetrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name         string
		cfg          Config
		withDeadline bool
	}{
		// No headers, no age bound: the guard only judges and counts.
		{"guard/no-deadline", Config{}, false},
		// Deadline header: parsed, and the handler runs under
		// context.WithDeadline (the dominant cost).
		{"guard/header-deadline", Config{}, true},
		// Age bound only: every record has a deadline from its timestamp.
		{"guard/max-age", Config{MaxAge: time.Hour}, false},
		// The full configuration: headers, age bound, metrics.
		{"guard/full+metrics", Config{MaxAge: time.Hour, Metrics: m}, true},
	} {
		recs := benchBatch(n, bc.withDeadline)
		b.Run("direct/"+bc.name[len("guard/"):], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range recs {
					if err := handler(ctx, r); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
		b.Run(bc.name, func(b *testing.B) {
			g, err := New(bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Process(ctx, recs, handler); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}

// BenchmarkCheck is the judging alone (header scan, parse, rule).
func BenchmarkCheck(b *testing.B) {
	g, _ := New(Config{MaxAge: time.Hour})
	r := benchBatch(1, true)[0]
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Check(r, now)
	}
}

// BenchmarkParallel runs the full guard from several goroutines (one per
// partition, as a consumer may), sharing counters.
func BenchmarkParallel(b *testing.B) {
	m, _ := ttlmetrics.New(prometheus.NewRegistry())
	g, _ := New(Config{MaxAge: time.Hour, Metrics: m})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		recs := benchBatch(1, true)
		ctx := context.Background()
		for pb.Next() {
			if _, err := g.Process(ctx, recs, func(context.Context, *kgo.Record) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSkipExpired is the cost of skipping one dead record (no
// dead-letter forward): under overload this is the guard's most frequent
// operation, so it must be cheap. ns/record and allocs are per record.
func BenchmarkSkipExpired(b *testing.B) {
	const n = 100
	m, _ := ttlmetrics.New(prometheus.NewRegistry())
	g, _ := New(Config{MaxAge: time.Second, Metrics: m})
	recs := benchBatch(n, true)
	for _, r := range recs {
		r.Timestamp = r.Timestamp.Add(-time.Hour) // too old
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Process(ctx, recs, handler); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	b.ReportMetric(float64(testing.AllocsPerRun(10, func() { _, _ = g.Process(ctx, recs, handler) }))/n, "allocs/record")
}
