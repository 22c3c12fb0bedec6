package integration

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/publish"
)

// produceFor sends 1 KiB records synchronously, in batches of 16, as
// client-id id, for the given number of seconds; it returns the bytes sent
// in each second.
func produceFor(tb testing.TB, addr, topic, id string, seconds int) []float64 {
	tb.Helper()
	cl := client(tb, addr, kgo.ClientID(id), kgo.DefaultProduceTopic(topic))
	val := make([]byte, 1024)
	out := make([]float64, seconds)
	for s := range out {
		start := time.Now()
		for time.Since(start) < time.Second {
			recs := make([]*kgo.Record, 16)
			for i := range recs {
				recs[i] = &kgo.Record{Value: val}
			}
			if err := cl.ProduceSync(ctxT(tb, 30*time.Second), recs...).FirstErr(); err != nil {
				tb.Fatalf("produce: %v", err)
			}
			out[s] += float64(len(recs) * len(val))
		}
	}
	return out
}

// steady is the mean rate after the first two seconds: the broker measures
// over a window and lets the first burst through before it throttles (and
// then holds the client below the quota until the burst is repaid).
func steady(perSecond []float64) float64 {
	var sum float64
	for _, v := range perSecond[2:] {
		sum += v
	}
	return sum / float64(len(perSecond)-2)
}

// TestRealKafkaClientQuotaThrottles: a producer that never imported the SDK
// is slowed to the broker-native quota lagbridge sets for its client-id,
// side by side with an unthrottled client-id; the quota is removed when the
// pressure is gone.
func TestRealKafkaClientQuotaThrottles(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic := unique("quota")
	createTopic(t, addr, topic, 1, nil)
	throttled, freeID := unique("plain-producer"), unique("free-producer")
	const quota = 64 << 10 // 64 KiB/s

	q := publish.NewClientQuotas(client(t, addr), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := q.Apply(ctxT(t, 30*time.Second), map[string]float64{throttled: quota}); err != nil {
		t.Fatal(err)
	}
	free := produceFor(t, addr, topic, freeID, 5)
	slow := produceFor(t, addr, topic, throttled, 5)
	freeRate, slowRate := steady(free), steady(slow)
	t.Logf("per second, KiB: unthrottled %v, throttled %v", kib(free), kib(slow))
	t.Logf("steady state: unthrottled %.0f KiB/s, throttled %.0f KiB/s (quota %d KiB/s): %.0fx apart", freeRate/1024, slowRate/1024, quota>>10, freeRate/slowRate)
	if slowRate > quota*1.2 {
		t.Errorf("throttled producer ran at %.0f B/s after the first window, above the %d B/s quota", slowRate, quota)
	}
	if freeRate < 10*slowRate {
		t.Errorf("unthrottled %.0f B/s is not well above throttled %.0f B/s", freeRate, slowRate)
	}

	res, err := q.Apply(ctxT(t, 30*time.Second), nil)
	if err != nil || len(res.Removed) != 1 || res.Removed[0] != throttled {
		t.Fatalf("clear: %+v %v", res, err)
	}
	cur, err := q.Current(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cur[throttled]; ok {
		t.Fatalf("quota still set after clearing: %v", cur)
	}
}

func kib(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x / 1024)
	}
	return out
}
