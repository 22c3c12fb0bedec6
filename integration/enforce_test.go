package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	natsobs "github.com/lagbridge/lagbridge/brokers/nats"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/internal/demo"
	"github.com/lagbridge/lagbridge/internal/enforce"
	"github.com/lagbridge/lagbridge/quota"
)

// TestDaemonEnforcesTTL: the daemon, configured to enforce a policy on the
// brokers, moves an empty group's offsets past records older than the hard
// age (only with apply; a dry run moves nothing) and sets the NATS stream's
// MaxAge to the policy's; on kfake and the embedded nats-server.
func TestDaemonEnforcesTTL(t *testing.T) {
	for _, apply := range []bool{false, true} {
		t.Run(fmt.Sprintf("apply=%v", apply), func(t *testing.T) {
			b, err := demo.StartBrokers(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			addr := b.KafkaAddrs()[0]
			topic, group := "dead-"+unique("t"), unique("g")
			createTopic(t, addr, topic, 1, nil)
			prod := client(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			old := time.Now().Add(-time.Minute)
			produce(t, prod, topic, 0, 50, func(int) time.Time { return old })
			produce(t, prod, topic, 0, 5, func(int) time.Time { return time.Now().Add(time.Minute) }) // live work
			consumeAndCommit(t, addr, group, topic, 1)                                                // then nobody: empty

			nc, err := nats.Connect(b.NATSURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			js, _ := jetstream.New(nc)
			ctx := ctxT(t, 30*time.Second)
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AGED", Subjects: []string{"aged.>"}}); err != nil {
				t.Fatal(err)
			}
			if _, err := js.CreateOrUpdateConsumer(ctx, "AGED", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
				t.Fatal(err)
			}

			cfg := config.Config{
				Kafka: []kafka.Config{{Cluster: "k", Brokers: []string{addr}, Groups: kafka.Filter{Include: []string{group}}}},
				NATS:  []natsobs.Config{{Cluster: "n", URLs: []string{b.NATSURL()}, Streams: natsobs.Filter{Include: []string{"AGED"}}}},
				Quota: config.Quota{Policies: []quota.Policy{{Name: "p", MaxAge: 2 * time.Second, HardAge: 10 * time.Second}}},
				TTL:   config.TTL{Enforce: []enforce.PolicyRule{{Policy: "p", KafkaOffsetMove: true, NATSStream: true, Apply: apply}}},
			}
			base := startApp(t, cfg)
			adm := kadm.NewClient(client(t, addr))
			committed := func() int64 {
				os, err := adm.FetchOffsets(context.Background(), group)
				if err != nil {
					return -2
				}
				o, _ := os.Lookup(topic, 0)
				return o.At
			}
			outcome := "dry-run"
			if apply {
				outcome = "applied"
				poll(t, 20*time.Second, func() (bool, string) {
					c := committed()
					return c == 50, fmt.Sprintf("committed %d, want 50 (the first record younger than maxAge)", c)
				})
				poll(t, 20*time.Second, func() (bool, string) {
					s, err := js.Stream(ctx, "AGED")
					return err == nil && s.CachedInfo().Config.MaxAge == 10*time.Second, "stream MaxAge not set"
				})
			}
			poll(t, 20*time.Second, func() (bool, string) {
				_, body := get(t, base+"/metrics")
				return strings.Contains(body, `lagbridge_ttl_offset_moves_total{cluster="k",group="`+group+`",outcome="`+outcome+`",topic="`+topic+`"} 1`), "no " + outcome + " move counted"
			})
			if !apply {
				if c := committed(); c != 1 {
					t.Fatalf("dry run moved the offset to %d", c)
				}
				s, _ := js.Stream(ctx, "AGED")
				if s.CachedInfo().Config.MaxAge != 0 {
					t.Fatal("dry run changed the stream")
				}
			}
		})
	}
}
