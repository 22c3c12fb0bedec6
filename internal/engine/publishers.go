package engine

import (
	"context"
	"fmt"
	"log/slog"
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

// ClientQuotaSweeper clears, once, the client quotas an earlier run of
// lagbridge left on a Kafka cluster where no policy opts in to
// kafkaClientQuota any more (the marker tells them apart from an
// operator's, which it never touches). Without it, turning the option off
// and restarting would leave those producers throttled by the broker for
// good. A failed attempt is retried with a doubling wait, from one
// publish to 64, until one succeeds: a cluster that refuses to describe
// client quotas costs one request a minute, not one a cycle.
type ClientQuotaSweeper struct {
	Cluster string
	Quotas  *publish.ClientQuotas
	Log     *slog.Logger
	done    bool
	wait    int // publishes to skip before the next attempt
	backoff int
}

// Name implements Publisher.
func (p *ClientQuotaSweeper) Name() string { return "kafka-client-quota-sweep/" + p.Cluster }

// Publish implements Publisher.
func (p *ClientQuotaSweeper) Publish(ctx context.Context, _ Snapshot) error {
	if p.done {
		return nil
	}
	if p.wait > 0 {
		p.wait--
		return nil
	}
	res, err := p.Quotas.Apply(ctx, nil)
	if err != nil {
		p.backoff = min(max(2*p.backoff, 1), 64)
		p.wait = p.backoff
		return fmt.Errorf("cluster %s: clearing client quotas an earlier run left: %w", p.Cluster, err)
	}
	p.done = true
	if len(res.Removed) > 0 && p.Log != nil {
		p.Log.Info("cleared client quotas an earlier run set (no policy has kafkaClientQuota)", "cluster", p.Cluster, "client_ids", res.Removed)
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
