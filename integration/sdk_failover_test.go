package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lagbridge/lagbridge/brokers/kafka"
	"github.com/lagbridge/lagbridge/internal/config"
	"github.com/lagbridge/lagbridge/producerclient"
	"github.com/lagbridge/lagbridge/quota"
)

// TestSDKFailsOverBetweenDaemons: a producer given two daemons' URLs
// takes its leases from the first; when that one stops, it moves to the
// second and its leases keep coming, without falling back to the safe
// quota.
func TestSDKFailsOverBetweenDaemons(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := config.Config{Interval: 250 * time.Millisecond,
		Kafka: []kafka.Config{{Cluster: "k", Brokers: c.ListenAddrs()}},
		Quota: config.Quota{LeaseLifetime: 10 * time.Second, Policies: []quota.Policy{{Name: "orders", MaxAge: 2 * time.Second,
			Producers: []quota.ProducerSpec{{ID: "svc-a", Criticality: quota.Critical}}}}},
	}
	first, kill := startKillableApp(t, cfg)
	second, _ := startKillableApp(t, cfg)

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, producerclient.KafkaClientOpts(nil)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	p, err := producerclient.NewKafka(cl, producerclient.Config{Producer: "svc-a", Topics: []string{"orders"},
		Leases: producerclient.LeaseConfig{URLs: []string{first, second}, Transport: producerclient.SSE,
			MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	poll(t, 30*time.Second, func() (bool, string) {
		q, _ := p.Quota("orders")
		return q.FromLease && p.Stats().LeaseURL == first, "no lease from the first daemon yet"
	})
	before, _ := p.Quota("orders")

	kill()
	poll(t, 30*time.Second, func() (bool, string) {
		q, _ := p.Quota("orders")
		s := p.Stats()
		return s.LeaseURL == second && q.FromLease && q.Received.After(before.Received),
			fmt.Sprintf("no lease from the second daemon yet: %+v %+v (before: %+v)", q, s, before)
	})
	if s := p.Stats(); s.LeaseFailovers < 1 || s.LeaseExpired != 0 {
		t.Fatalf("failovers %d, expired leases %d: want a failover and no lease lost", s.LeaseFailovers, s.LeaseExpired)
	}
}
