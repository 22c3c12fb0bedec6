package consumerclient

import (
	"context"
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
