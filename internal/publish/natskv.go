package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// KV publishes every producer's leases to a NATS KV bucket, one key per
// (producer, topic) as quotaproto.KVKey names it, with a JSON
// quotaproto.Lease as value. Any NATS client can watch it. Not safe for
// concurrent use: the quota cycle owns it.
type KV struct {
	kv jetstream.KeyValue
	// last holds the lease version last written per key.
	last map[string]uint64
}

// NewKV creates (or reuses) the bucket. Keys left by an earlier run are
// adopted, so leases that no longer exist are deleted at the first Publish.
func NewKV(ctx context.Context, js jetstream.JetStream, bucket string) (*KV, error) {
	if bucket == "" {
		bucket = quotaproto.DefaultKVBucket
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, History: 1, Description: "lagbridge producer quotas: <producer>.<topic> -> lease (JSON)",
	})
	if err != nil {
		return nil, fmt.Errorf("quota KV bucket %q: %w", bucket, err)
	}
	p := &KV{kv: kv, last: map[string]uint64{}}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list quota KV keys: %w", err)
	}
	for k := range keys.Keys() {
		p.last[k] = 0
	}
	return p, nil
}

// Publish writes the leases whose version changed and deletes the keys of
// leases that are gone. It returns how many keys it wrote and deleted.
func (p *KV) Publish(ctx context.Context, sets []quotaproto.LeaseSet) (written, deleted int, err error) {
	seen := make(map[string]bool, len(p.last))
	var errs []error
	for _, s := range sets {
		for _, l := range s.Leases {
			k := quotaproto.KVKey(s.Producer, l.Topic)
			seen[k] = true
			if v, ok := p.last[k]; ok && v == l.Version && v != 0 {
				continue
			}
			b, _ := json.Marshal(l)
			if _, err := p.kv.Put(ctx, k, b); err != nil {
				errs = append(errs, fmt.Errorf("put %s: %w", k, err))
				continue
			}
			p.last[k] = l.Version
			written++
		}
	}
	for k := range p.last {
		if seen[k] {
			continue
		}
		if err := p.kv.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			errs = append(errs, fmt.Errorf("delete %s: %w", k, err))
			continue
		}
		delete(p.last, k)
		deleted++
	}
	return written, deleted, errors.Join(errs...)
}
