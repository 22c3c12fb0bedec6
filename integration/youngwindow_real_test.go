package integration

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/publish"
)

// produceMeter counts the bytes a client writes in Produce requests and
// keeps the longest throttle a broker answered with.
type produceMeter struct {
	bytes, longest atomic.Int64
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (m *produceMeter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, n int, _, _ time.Duration, err error) {
	if key == 0 && err == nil { // Produce
		m.bytes.Add(int64(n))
	}
}

// OnBrokerThrottle implements kgo.HookBrokerThrottle.
func (m *produceMeter) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	for cur := m.longest.Load(); int64(d) > cur && !m.longest.CompareAndSwap(cur, int64(d)); cur = m.longest.Load() {
	}
}

// TestRealKafkaYoungWindowCut: a producer that started a second ago, cut
// from what the brokers' producer state says it wrote (RecordSizes.Busiest,
// which counts a producer first described after the first reading over
// Kafka's shortest window, (Num - 1) x Size) with a 1 s hold. Kafka 4.x
// divides a client's window that began less than that ago by that much,
// so the cut binds (the producer is throttled at once) and holds it about
// the hold, not the several seconds that Kafka's rule would give if it
// divided by the time since the producer started; taken over the time the
// readings cover instead, as before, the quota was ten times what the
// producer sent over Kafka's window and did not bind at all.
func TestRealKafkaYoungWindowCut(t *testing.T) {
	addr := kafkatest.Bootstrap(t)
	topic, id := unique("young"), unique("young-producer")
	createTopic(t, addr, topic, 1, nil)
	q := publish.NewClientQuotas(client(t, addr), slog.New(slog.NewTextHandler(io.Discard, nil)))
	q.Owns = func(c string) bool { return c == id }
	t.Cleanup(func() { _, _ = q.Apply(ctxT(t, 30*time.Second), nil) })
	set := func(v float64) {
		if _, err := q.Apply(ctxT(t, 30*time.Second), map[string]float64{id: v}); err != nil {
			t.Fatal(err)
		}
		poll(t, 10*time.Second, func() (bool, string) {
			cur, err := q.Current(ctxT(t, 10*time.Second))
			return err == nil && cur[id] == publish.Marked(v), fmt.Sprintf("quota %v not on the broker yet: %v (%v)", publish.Marked(v), cur, err)
		})
	}
	// The ceiling lagbridge keeps on a listed client-id: the broker
	// measures the client from its first request.
	set(publish.Ceiling)
	sizes := publish.NewRecordSizes(client(t, addr))
	if err := sizes.Measure(ctxT(t, 30*time.Second), []string{topic}); err != nil {
		t.Fatal(err)
	}
	m := &produceMeter{}
	cl := client(t, addr, kgo.ClientID(id), kgo.DefaultProduceTopic(topic), kgo.WithHooks(m))
	send := func() int {
		recs := make([]*kgo.Record, 16)
		for i := range recs {
			val := make([]byte, 1024) // random: franz-go compresses batches
			rand.Read(val)
			recs[i] = &kgo.Record{Value: val}
		}
		if err := cl.ProduceSync(ctxT(t, 30*time.Second), recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		return len(recs)
	}
	records := 0
	for start := time.Now(); time.Since(start) < time.Second; {
		records += send()
	}
	if err := sizes.Measure(ctxT(t, 30*time.Second), []string{topic}); err != nil {
		t.Fatal(err)
	}
	top, ok := sizes.Busiest(topic, publish.DefaultWindow, 0)
	if !ok {
		t.Fatal("no busiest producer known after two readings")
	}
	perRecord := float64(m.bytes.Load()) / float64(records)
	hold := time.Second
	quota := publish.Floor(top*perRecord, publish.DefaultWindow, hold)
	set(quota)
	before := m.longest.Load()
	for range 3 {
		send()
	}
	throttle := time.Duration(m.longest.Load())
	t.Logf("%d records (%.0f B each on the wire) in a second; busiest %.0f records/s; quota %.0f B/s; longest throttle %s (before the cut %s)",
		records, perRecord, top, quota, throttle, time.Duration(before))
	if throttle <= 0 {
		t.Errorf("the cut to %.0f B/s did not bind: no throttle", quota)
	}
	if throttle > hold+time.Second {
		t.Errorf("the cut held the producer %s, want about the hold %s", throttle, hold)
	}
}
