package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// KV publishes every producer's leases to a NATS KV bucket, one key per
// (producer, topic) as quotaproto.KVKey names it, with a JSON
// quotaproto.Lease as value. Any NATS client can watch it. Not safe for
// concurrent use: the quota cycle owns it.
//
// A key is rewritten when its lease changes (a new version) and, for a
// lease that stays the same, once its expiry has moved on by the set's
// refresh interval: the daemon extends a steady lease every cycle without
// a new version, and a reader of the bucket must never see it expire while
// the daemon still grants it.
//
// Under a replica's lease (leader.Fence put the epoch in Publish's
// context), every write is fenced by the broker (leader.KVFence): once
// another replica took over, the server refuses this one's writes.
type KV struct {
	kv    jetstream.KeyValue
	fence *leader.KVFence
	// last is what was last written per key.
	last map[string]written
}

// written is the version and expiry of the lease last written to a key;
// the zero value is a key adopted from an earlier run (rewritten at once).
type written struct {
	version uint64
	expires time.Time
	ours    bool
}

// stale reports whether the key holding w must be rewritten for l, a
// lease of a set that is refreshed every refresh.
func (w written) stale(l quotaproto.Lease, refresh time.Duration) bool {
	if !w.ours || w.version != l.Version {
		return true
	}
	moved := l.ExpiresAt.Sub(w.expires)
	return moved > 0 && moved >= refresh
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
	p := &KV{kv: kv, fence: leader.NewKVFence(js, kv), last: map[string]written{}}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list quota KV keys: %w", err)
	}
	for k := range keys.Keys() {
		if k != leader.FenceKey {
			p.last[k] = written{}
		}
	}
	return p, nil
}

// Publish writes the leases that changed or whose written expiry fell a
// refresh interval behind, and deletes the keys of leases that are gone.
// It returns how many keys it wrote and deleted.
func (p *KV) Publish(ctx context.Context, sets []quotaproto.LeaseSet) (wrote, deleted int, err error) {
	seen := make(map[string]bool, len(p.last))
	var errs []error
	for _, s := range sets {
		refresh := time.Duration(s.RefreshAfterMs) * time.Millisecond
		for _, l := range s.Leases {
			k := quotaproto.KVKey(s.Producer, l.Topic)
			seen[k] = true
			if w, ok := p.last[k]; ok && !w.stale(l, refresh) {
				continue
			}
			b, _ := json.Marshal(l)
			if err := p.put(ctx, k, b); err != nil {
				if errors.Is(err, leader.ErrFenced) {
					return wrote, deleted, err // no later write would land either
				}
				errs = append(errs, fmt.Errorf("put %s: %w", k, err))
				continue
			}
			p.last[k] = written{version: l.Version, expires: l.ExpiresAt, ours: true}
			wrote++
		}
	}
	for k := range p.last {
		if seen[k] {
			continue
		}
		if err := p.delete(ctx, k); err != nil {
			if errors.Is(err, leader.ErrFenced) {
				return wrote, deleted, err
			}
			errs = append(errs, fmt.Errorf("delete %s: %w", k, err))
			continue
		}
		delete(p.last, k)
		deleted++
	}
	return wrote, deleted, errors.Join(errs...)
}

// put writes a key, fenced when ctx carries a leader's epoch.
func (p *KV) put(ctx context.Context, k string, b []byte) error {
	if epoch, ok := leader.EpochOf(ctx); ok {
		_, err := p.fence.Put(ctx, epoch, k, b)
		return err
	}
	_, err := p.kv.Put(ctx, k, b)
	return err
}

// delete deletes a key, fenced when ctx carries a leader's epoch; a key
// already gone is no error.
func (p *KV) delete(ctx context.Context, k string) error {
	var err error
	if epoch, ok := leader.EpochOf(ctx); ok {
		err = p.fence.Delete(ctx, epoch, k)
	} else {
		err = p.kv.Delete(ctx, k)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}
