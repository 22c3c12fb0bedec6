package replica

import (
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
	"github.com/lagbridge/lagbridge/internal/embedded"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// BenchmarkLeaderServes measures, on a leader, the time from the engine
// publishing a new version of a producer's set to the hub serving it
// (what a watching producer then gets at once; BenchmarkPushLatency in
// internal/quotaserver is the rest): the leader serves it once its write
// to the lease state landed, so this is about that write, on the embedded
// nats-server, kfake and the real Kafka (kafkatest). p50 and p99 in µs.
func BenchmarkLeaderServes(b *testing.B) {
	chans := map[string]func(b *testing.B) Channel{
		"nats": func(b *testing.B) Channel {
			return NewNATS(embedded.JetStreamTest(b), NATSBucket("bench"))
		},
	}
	for name, seeds := range kafkatest.Clusters() {
		chans["kafka-"+name] = func(b *testing.B) Channel {
			topic := leaseTopic("bench")
			opts := []kgo.Opt{kgo.SeedBrokers(seeds(b)...)}
			ch := NewKafka(opts, topic)
			b.Cleanup(func() { ch.Close(); deleteTopic(opts, topic) })
			return ch
		}
	}
	for name, mk := range chans {
		b.Run(name, func(b *testing.B) {
			lead := newNode(b, mk(b), true)
			if _, err := lead.rep.Report(quotaproto.Report{Producer: "p", Topics: []quotaproto.TopicDemand{{Topic: "orders"}}}); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < 3; i++ { // the topic, the transactions
				v, _, _ := lead.hub.Current("p")
				lead.eng.Renumber(v.Version)
				waitFor(b, "the first sets served", func() bool { cur, _, _ := lead.hub.Current("p"); return cur.Version > v.Version })
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				time.Sleep(20 * time.Millisecond) // a change now and then
				cur, changed, _ := lead.hub.Current("p")
				start := time.Now()
				lead.eng.Renumber(cur.Version)
				for {
					select {
					case <-changed:
					case <-time.After(10 * time.Second):
						b.Fatal("not served within 10s")
					}
					var now quotaproto.LeaseSet
					now, changed, _ = lead.hub.Current("p")
					if now.Version > cur.Version {
						break
					}
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
