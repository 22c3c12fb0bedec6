package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// KV publishes every producer's leases to a NATS KV bucket, one key per
// (producer, topic) as quotaproto.KVKey names it, with a JSON
// quotaproto.Lease as value and, beside the lease's fields, "deployment":
// the name of the deployment that wrote it (ha.name). Any NATS client can
// watch it. Not safe for concurrent use: the quota cycle owns it.
//
// A key is rewritten when its lease changes (a new version) and, for a
// lease that stays the same, once its expiry has moved on by the set's
// refresh interval: the daemon extends a steady lease every cycle without
// a new version, and a reader of the bucket must never see it expire while
// the daemon still grants it.
//
// Several deployments may share the bucket: each deletes and overwrites
// only its own keys. A key is its own when its value names its deployment,
// or names none (an earlier version wrote it: adopted, as that version
// adopted every key). A key holding another deployment's unexpired lease is
// left alone, and named once in the log; one whose lease expired (its
// deployment no longer refreshes it) may be taken over.
//
// Under a replica's lease (leader.Fence put the epoch in Publish's
// context), every write is fenced by the broker on the deployment's own
// fence key (leader.NewDeploymentKVFence): once another replica of the
// deployment took over, the server refuses this one's writes.
type KV struct {
	kv         jetstream.KeyValue
	fence      *leader.KVFence
	deployment string
	log        *slog.Logger
	now        func() time.Time
	// last is what was last written per key: the keys it owns.
	last map[string]written
	// foreign holds the keys another deployment's lease holds that this
	// one leases too, by that deployment's name, once logged.
	foreign map[string]string
}

// KVConfig configures a KV.
type KVConfig struct {
	// Bucket defaults to quotaproto.DefaultKVBucket.
	Bucket string
	// Deployment names the deployment (ha.name); default
	// DefaultDeployment.
	Deployment string
	// Log receives the keys left to other deployments; nil: discarded.
	Log *slog.Logger
}

// DefaultDeployment is the deployment name of a KV with none (ha.name's
// default).
const DefaultDeployment = "lagbridge"

// kvLease is a lease as the bucket holds it: the deployment that wrote
// it beside the lease's fields (readers ignore what they do not know).
type kvLease struct {
	quotaproto.Lease
	Deployment string `json:"deployment,omitempty"`
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

// NewKV creates (or reuses) the bucket. The keys of this deployment left by
// an earlier run are adopted, so its leases that no longer exist are
// deleted at the first Publish.
func NewKV(ctx context.Context, js jetstream.JetStream, cfg KVConfig) (*KV, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = quotaproto.DefaultKVBucket
	}
	if cfg.Deployment == "" {
		cfg.Deployment = DefaultDeployment
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Bucket, History: 1, Description: "lagbridge producer quotas: <producer>.<topic> -> lease (JSON, with the deployment that wrote it)",
	})
	if err != nil {
		return nil, fmt.Errorf("quota KV bucket %q: %w", cfg.Bucket, err)
	}
	p := &KV{kv: kv, fence: leader.NewDeploymentKVFence(js, kv, cfg.Deployment), deployment: cfg.Deployment,
		log: cfg.Log, now: time.Now, last: map[string]written{}, foreign: map[string]string{}}
	if err := p.adopt(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// adopt reads every key of the bucket and adopts this deployment's.
func (p *KV) adopt(ctx context.Context) error {
	w, err := p.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read quota KV keys: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("read quota KV keys: %w", context.Cause(ctx))
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("read quota KV keys: the watcher closed")
			}
			if e == nil {
				return nil // every key read
			}
			if _, _, err := quotaproto.ParseKVKey(e.Key()); err != nil {
				continue // a fence key, or not a lease
			}
			if owner, _, ok := decodeOwner(e.Value()); ok && (owner == "" || owner == p.deployment) {
				p.last[e.Key()] = written{}
			}
		}
	}
}

// decodeOwner returns the deployment that wrote a lease value and the
// lease's expiry; ok is false when the value is no lease.
func decodeOwner(b []byte) (owner string, expires time.Time, ok bool) {
	var l kvLease
	if err := json.Unmarshal(b, &l); err != nil {
		return "", time.Time{}, false
	}
	return l.Deployment, l.ExpiresAt, true
}

// Publish writes the leases that changed or whose written expiry fell a
// refresh interval behind, and deletes the keys of this deployment's
// leases that are gone. It returns how many keys it wrote and deleted.
func (p *KV) Publish(ctx context.Context, sets []quotaproto.LeaseSet) (wrote, deleted int, err error) {
	seen := make(map[string]bool, len(p.last))
	var errs []error
	for _, s := range sets {
		refresh := time.Duration(s.RefreshAfterMs) * time.Millisecond
		for _, l := range s.Leases {
			k := quotaproto.KVKey(s.Producer, l.Topic)
			seen[k] = true
			w, ours := p.last[k]
			if ours && !w.stale(l, refresh) {
				continue
			}
			if !ours {
				free, err := p.claim(ctx, k, s.Producer, l.Topic)
				if err != nil {
					errs = append(errs, err)
				}
				if !free {
					continue
				}
			}
			b, _ := json.Marshal(kvLease{Lease: l, Deployment: p.deployment})
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
		if mine, err := p.stillMine(ctx, k); err != nil || !mine {
			if err != nil {
				errs = append(errs, err)
			} else {
				delete(p.last, k) // another deployment wrote it since
			}
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

// stillMine reports whether the key k, which this deployment wrote or
// adopted, still holds its lease (or an earlier version's, or nothing)
// before it deletes it: two deployments that created one key at the same
// moment both believe they own it, and the one that lost must not delete
// the other's.
func (p *KV) stillMine(ctx context.Context, k string) (bool, error) {
	e, err := p.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", k, err)
	}
	owner, _, ok := decodeOwner(e.Value())
	return !ok || owner == "" || owner == p.deployment, nil
}

// claim reports whether the key k, not (or no longer) this deployment's,
// may be written: it is free unless another deployment's unexpired lease
// holds it, which is named once in the log. Two deployments leasing one
// producer on one topic in one bucket is a conflict of configuration:
// the producer reads one lease per topic from the bucket.
func (p *KV) claim(ctx context.Context, k, producer, topic string) (bool, error) {
	e, err := p.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		delete(p.foreign, k)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", k, err)
	}
	owner, expires, ok := decodeOwner(e.Value())
	if !ok || owner == "" || owner == p.deployment || !expires.After(p.now()) {
		delete(p.foreign, k)
		return true, nil
	}
	if p.foreign[k] != owner {
		p.foreign[k] = owner
		p.log.Warn("quota KV lease left alone: another deployment on the bucket leases this producer on this topic (give each producer id and topic to one deployment per bucket, or give the deployments their own quota.natsKV.bucket)",
			"bucket", p.kv.Bucket(), "key", k, "producer", producer, "topic", topic, "deployment", p.deployment, "other_deployment", owner)
	}
	return false, nil
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
