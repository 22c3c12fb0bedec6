// Package replica lets every lagbridge replica serve the quota protocol:
// the leader writes each producer's lease set to a channel in the brokers
// (a NATS KV bucket, or a compacted Kafka topic for Kafka-only
// deployments), every replica reads the channel, and a follower serves the
// leader's sets from its hub. A producer's report, whichever replica it
// reaches, is written to the same channel and read by every replica's
// engine, so the leader knows every producer and a follower that takes
// over knows them already.
//
// It imports the broker clients and the daemon's engine and hub; nothing
// imports it but internal/app.
package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// Channel is a replicated map of keys to values in a broker, read by
// every replica. Safe for concurrent use.
type Channel interface {
	// Put writes value under key.
	Put(ctx context.Context, key string, value []byte) error
	// Delete removes key (a no-op for a key that does not exist).
	Delete(ctx context.Context, key string) error
	// Watch calls f for every key's current value, then synced once, then
	// f for every change (value nil: deleted), until ctx is done or the
	// channel fails. f and synced run on Watch's goroutine.
	Watch(ctx context.Context, f func(key string, value []byte), synced func()) error
}

// entry is a key and its value.
type entry struct {
	key   string
	value []byte
}

// batchPutter is a Channel that writes several entries at once: on Kafka
// a leader's write is a transaction (see kafkaChannel), one for all the
// sets a publish writes rather than one each. An entry whose value is nil
// deletes its key.
type batchPutter interface {
	PutAll(ctx context.Context, es []entry) error
}

// Keys: "s.<producer>" holds the leader's set of a producer, "r.<producer>"
// the producer's last report; the producer id escaped as quotaproto.KVKey
// escapes it.
const (
	kindSet    = "s"
	kindReport = "r"
)

func key(kind, producer string) string { return quotaproto.KVKey(kind, producer) }

// setRecord is a replicated lease set and when the leader wrote it.
type setRecord struct {
	Set quotaproto.LeaseSet `json:"set"`
	At  time.Time           `json:"at"`
}

// reportRecord is a replicated report and when a replica received it.
type reportRecord struct {
	Report quotaproto.Report `json:"report"`
	At     time.Time         `json:"at"`
}

// NATSBucket is the KV bucket of the replicated lease state for the
// election named name ("lagbridge_leases_<name>").
func NATSBucket(name string) string { return "lagbridge_leases_" + name }

// natsChannel is a Channel on a NATS KV bucket (history 1). A write
// whose context carries a leader's epoch (leader.Fence) is fenced by the
// broker (leader.KVFence); the others (reports) are plain.
type natsChannel struct {
	js     jetstream.JetStream
	bucket string
	mu     sync.Mutex
	kv     jetstream.KeyValue // nil until opened
	// fence is used by the leader's writes (the engine's publishing
	// goroutine and the decisions one), one at a time (fmu).
	fmu   sync.Mutex
	fence *leader.KVFence
}

// NewNATS returns a Channel on the KV bucket, created (or adopted) at its
// first use so the daemon starts while NATS is unreachable.
func NewNATS(js jetstream.JetStream, bucket string) Channel {
	return &natsChannel{js: js, bucket: bucket}
}

func (n *natsChannel) open(ctx context.Context) (jetstream.KeyValue, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kv != nil {
		return n.kv, nil
	}
	kv, err := n.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: n.bucket, History: 1,
		Description: "lagbridge replicated lease state: s.<producer> -> the leader's lease set, r.<producer> -> its last report"})
	if err != nil {
		return nil, fmt.Errorf("lease state KV bucket %q: %w", n.bucket, err)
	}
	n.kv, n.fence = kv, leader.NewKVFence(n.js, kv)
	return kv, nil
}

func (n *natsChannel) Put(ctx context.Context, key string, value []byte) error {
	kv, err := n.open(ctx)
	if err != nil {
		return err
	}
	if epoch, ok := leader.EpochOf(ctx); ok {
		n.fmu.Lock()
		defer n.fmu.Unlock()
		_, err = n.fence.Put(ctx, epoch, key, value)
		return err
	}
	_, err = kv.Put(ctx, key, value)
	return err
}

func (n *natsChannel) Delete(ctx context.Context, key string) error {
	kv, err := n.open(ctx)
	if err != nil {
		return err
	}
	if epoch, ok := leader.EpochOf(ctx); ok {
		n.fmu.Lock()
		err = n.fence.Delete(ctx, epoch, key)
		n.fmu.Unlock()
	} else {
		err = kv.Delete(ctx, key)
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}

func (n *natsChannel) Watch(ctx context.Context, f func(string, []byte), synced func()) error {
	kv, err := n.open(ctx)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch lease state: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("lease state watch ended")
			}
			if e == nil {
				synced()
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				f(e.Key(), nil)
				continue
			}
			f(e.Key(), e.Value())
		}
	}
}

// encode marshals a record; the types marshal without error.
func encode(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
