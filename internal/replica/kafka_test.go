package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/integration/kafkatest"
)

// TestKafkaChannelTopicConfigs: the lease state topic is created compacted
// and rolls its segments, so that a replica starting later reads the
// compacted state, not every rewrite since the broker's default segment
// (7 days) began.
func TestKafkaChannelTopicConfigs(t *testing.T) {
	for name, seeds := range kafkatest.Clusters() {
		t.Run(name, func(t *testing.T) {
			opts := []kgo.Opt{kgo.SeedBrokers(seeds(t)...)}
			topic := fmt.Sprintf("lagbridge-test-%d.leases", time.Now().UnixNano())
			ch := NewKafka(opts, topic)
			defer ch.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := ch.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			defer func() { _, _ = adm.DeleteTopics(context.Background(), topic) }()
			rc, err := adm.DescribeTopicConfigs(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			c, err := rc.On(topic, nil)
			if err != nil || c.Err != nil {
				t.Fatalf("describe %s: %v %v", topic, err, c.Err)
			}
			got := map[string]string{}
			for _, e := range c.Configs {
				got[e.Key] = e.MaybeValue()
			}
			for k, want := range map[string]string{"cleanup.policy": "compact", "segment.ms": "600000"} {
				if got[k] != want {
					t.Errorf("%s = %q, want %q", k, got[k], want)
				}
			}
		})
	}
}
