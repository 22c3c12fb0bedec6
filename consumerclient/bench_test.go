package consumerclient

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkKafkaHook is the hook's cost per polled record (it runs on the
// polling goroutine): one uncontended lock and an append, no allocation
// once a partition's slice has grown to the poll size.
func BenchmarkKafkaHook(b *testing.B) {
	rep, err := NewKafkaReporter(Config{URL: "http://127.0.0.1:1", Interval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer rep.Close()
	h := rep.Hook().(*kafkaHook)
	const perPoll = 500
	recs := make([]*kgo.Record, perPoll)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "orders", Partition: int32(i / 100), Offset: int64(i), Timestamp: time.Now()}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%perPoll == 0 {
			h.OnPollStart(context.Background())
		}
		h.OnFetchRecordUnbuffered(recs[i%perPoll], true)
	}
}

// BenchmarkKafkaHookKeep is the per-record cost with KeepUntilFinished:
// the hook on the polling goroutine, then Done from the consumer's worker
// (here the same goroutine, so the lock is uncontended), which finishes
// a poll's 500 records (5 partitions) once they are all handed out. In
// order: each Done finishes the oldest;
// out of order: each poll's records of a partition are finished last
// first, so every Done but the last waits behind an unfinished one;
// one stuck: in order, but each partition's first record is never
// finished, so every record finished waits behind it until the slice is
// compacted.
func BenchmarkKafkaHookKeep(b *testing.B) {
	for _, order := range []string{"in-order", "out-of-order", "one-stuck"} {
		b.Run(order, func(b *testing.B) {
			rep, err := NewKafkaReporter(Config{URL: "http://127.0.0.1:1", Interval: time.Second, KeepUntilFinished: true})
			if err != nil {
				b.Fatal(err)
			}
			defer rep.Close()
			h := rep.Hook().(*kafkaHook)
			const perPoll, parts = 500, 5
			recs := make([]*kgo.Record, perPoll)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: "orders", Partition: int32(i / (perPoll / parts)), Timestamp: time.Now()}
			}
			done := make([]*kgo.Record, perPoll) // the order the workers finish a poll in
			copy(done, recs)
			if order == "out-of-order" {
				for p := range parts {
					slices.Reverse(done[p*perPoll/parts : (p+1)*perPoll/parts])
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := i % perPoll
				if j == 0 {
					h.OnPollStart(context.Background())
					for k := range recs { // offsets of this poll
						recs[k].Offset = int64(i/perPoll*perPoll/parts + k%(perPoll/parts))
					}
				}
				h.OnFetchRecordUnbuffered(recs[j], true)
				if j == perPoll-1 { // the workers finish the poll
					for _, r := range done {
						if order != "one-stuck" || r.Offset != 0 {
							rep.Done(r)
						}
					}
				}
			}
		})
	}
}
