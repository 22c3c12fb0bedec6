package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/publish"
)

// TestRealKafkaRecordSizesBusiestProducer: the busiest producer's rate, read
// from the broker's producer state (DescribeProducers), on Kafka 4.x:
// two idempotent producers (franz-go's default) write 600 and 200 records
// over 3 partitions between two readings; Busiest is the first one's
// records over the time between the readings (less than the window span):
// 3/4 of the topic's rate, not all of it and not an equal split's half.
func TestRealKafkaRecordSizesBusiestProducer(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic := unique("top")
	createTopic(t, addr, topic, 3, nil)
	sizes := publish.NewRecordSizes(client(t, addr))
	if err := sizes.Measure(ctxT(t, 30*time.Second), []string{topic}); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{600, 200} {
		cl := client(t, addr, kgo.ClientID(fmt.Sprintf("top-%d", i)), kgo.DefaultProduceTopic(topic))
		recs := make([]*kgo.Record, n)
		for j := range recs {
			recs[j] = &kgo.Record{Value: fmt.Appendf(nil, "%d-%d", i, j)}
		}
		if err := cl.ProduceSync(ctxT(t, 30*time.Second), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := sizes.Measure(ctxT(t, 30*time.Second), []string{topic}); err != nil {
		t.Fatal(err)
	}
	top, ok := sizes.Busiest(topic, publish.DefaultWindow.Span())
	if !ok {
		t.Fatal("no busiest producer known after two readings")
	}
	rate, _ := sizes.Rate(topic)
	// Both are over the time between the readings: the busiest producer
	// wrote 600 of the topic's 800 records.
	if r := top / rate; r < 0.749 || r > 0.751 {
		t.Errorf("busiest producer %.1f records/s, topic %.1f: a share of %.3f, want 0.75", top, rate, r)
	}
}
