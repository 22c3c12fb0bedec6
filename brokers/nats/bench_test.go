package nats

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkObserve measures one Observe cycle against an embedded server
// with 50 streams x 20 consumers (half filtered), every consumer lagging.
//
//	refresh-warm: every stream refreshed, heads from the cache (ack floors
//	              did not move): 1 + 50 list pages, 50 stream infos, 0 gets.
//	refresh-cold: as above with the head cache emptied first, as when every
//	              ack floor moved: 1,000 gets.
//	reuse:        InfoInterval not due: one stream list page, readings
//	              repeated.
func BenchmarkObserve(b *testing.B) {
	const nStreams, nConsumers, nMsgs = 50, 20, 20
	s := startServer(b, nil)
	c := newClient(b, s)
	for i := range nStreams {
		name := fmt.Sprintf("B%02d", i)
		c.stream(b, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".*"}, AllowDirect: true})
		subjects := make([]string, nMsgs)
		for m := range subjects {
			subjects[m] = fmt.Sprintf("%s.%c", name, 'a'+m%2)
		}
		c.publish(b, subjects...)
		for j := range nConsumers {
			cfg := jetstream.ConsumerConfig{Durable: fmt.Sprintf("c%02d", j), AckPolicy: jetstream.AckExplicitPolicy}
			if j%2 == 1 {
				cfg.FilterSubject = name + ".b"
			}
			c.consumer(b, name, cfg)
		}
	}

	run := func(b *testing.B, infoInterval time.Duration, cold bool) {
		o := newObserver(b, s, func(c *Config) { c.InfoInterval = infoInterval })
		if n := len(observe(b, o)); n != nStreams*nConsumers {
			b.Fatalf("%d samples, want %d", n, nStreams*nConsumers)
		}
		before := o.Stats().Total
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if cold {
				for _, st := range o.state {
					clear(st.heads)
				}
			}
			if _, err := o.Observe(ctxT(b)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		total := o.Stats().Total
		n := float64(b.N)
		b.ReportMetric(float64(total.ListCalls-before.ListCalls)/n, "lists/op")
		b.ReportMetric(float64(total.StreamInfoCalls-before.StreamInfoCalls)/n, "infos/op")
		b.ReportMetric(float64(total.GetCalls-before.GetCalls)/n, "gets/op")
	}
	b.Run("refresh-warm", func(b *testing.B) { run(b, time.Nanosecond, false) })
	b.Run("refresh-cold", func(b *testing.B) { run(b, time.Nanosecond, true) })
	b.Run("reuse", func(b *testing.B) { run(b, time.Hour, false) })
}

// BenchmarkRead measures the pure derivation of one reading.
func BenchmarkRead(b *testing.B) {
	ci := &jetstream.ConsumerInfo{
		Config:   jetstream.ConsumerConfig{FilterSubjects: []string{"a.*", "b.*"}},
		AckFloor: jetstream.SequenceInfo{Stream: 40}, Delivered: jetstream.SequenceInfo{Consumer: 70, Stream: 60},
		NumAckPending: 5, NumPending: 40,
	}
	sv := streamView{subjects: []string{"a.*", "b.*", "c.*"}, before: state(1, 100, 100), after: state(1, 100, 100)}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := read(ci, sv); r.part.Lag != 45 {
				b.Fatal(r.part.Lag)
			}
		}
	})
}
