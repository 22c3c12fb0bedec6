package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// KVPublisher publishes every lease set to a NATS KV bucket. The bucket is
// created (or adopted) at the first publish, so the daemon can start while
// NATS is still unreachable.
type KVPublisher struct {
	JS     jetstream.JetStream
	Bucket string
	kv     *publish.KV
}

// Name implements Publisher.
func (p *KVPublisher) Name() string { return "nats-kv" }

// Publish implements Publisher.
func (p *KVPublisher) Publish(ctx context.Context, s Snapshot) error {
	if p.kv == nil {
		kv, err := publish.NewKV(ctx, p.JS, p.Bucket)
		if err != nil {
			return err
		}
		p.kv = kv
	}
	_, _, err := p.kv.Publish(ctx, s.Sets)
	return err
}

// ClientQuotaPublisher keeps one Kafka cluster's producer_byte_rate client
// quotas in line with the leases of policies that opted in
// (kafkaClientQuota: true): for each producer the policy lists, the sum of
// its finite, enforced grants on the cluster's topics, times
// BytesPerMessage. A producer whose grants are all unlimited gets no quota
// (lagbridge clears the one it set).
type ClientQuotaPublisher struct {
	Cluster         string
	Quotas          *publish.ClientQuotas
	BytesPerMessage float64
}

// Name implements Publisher.
func (p ClientQuotaPublisher) Name() string { return "kafka-client-quotas/" + p.Cluster }

// Publish implements Publisher.
func (p ClientQuotaPublisher) Publish(ctx context.Context, s Snapshot) error {
	_, err := p.Quotas.Apply(ctx, p.Want(s))
	if err != nil {
		return fmt.Errorf("cluster %s: %w", p.Cluster, err)
	}
	return nil
}

// Want returns the byte rate per client-id the snapshot asks for.
func (p ClientQuotaPublisher) Want(s Snapshot) map[string]float64 {
	want := map[string]float64{}
	for _, l := range s.Leases {
		if l.Topic.Kind != lag.KindKafka || l.Topic.Cluster != p.Cluster || l.IsUnlimited() || l.Advisory {
			continue
		}
		d, ok := s.Topics[l.Topic]
		if !ok {
			continue
		}
		pol, ok := s.Policies.ByName(d.Policy)
		if !ok || !pol.KafkaClientQuota || !slices.ContainsFunc(pol.Producers, func(ps quota.ProducerSpec) bool { return ps.ID == l.Producer }) {
			continue
		}
		want[l.Producer] += l.Rate * p.BytesPerMessage
	}
	return want
}
