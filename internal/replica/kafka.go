package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaTopic is the compacted topic of the replicated lease state for the
// election named name ("<name>.leases").
func KafkaTopic(name string) string { return name + ".leases" }

// kafkaChannel is a Channel on a one-partition compacted Kafka topic: a
// value is a record under its key, a deletion a tombstone; a reader
// consumes the topic from its start (no group).
type kafkaChannel struct {
	opts  []kgo.Opt
	topic string

	mu sync.Mutex
	cl *kgo.Client // the writer; nil until the first Put or Delete
}

// NewKafka returns a Channel on the compacted topic, created (one
// partition, the broker's replication factor) at its first use; opts
// connect to the cluster (seeds, TLS, SASL). Close releases the writer.
func NewKafka(opts []kgo.Opt, topic string) interface {
	Channel
	Close()
} {
	return &kafkaChannel{opts: opts, topic: topic}
}

// topicConfigs are the lease state topic's settings at creation. The
// leader and the shard owners rewrite their records every cycle, and the
// log cleaner never compacts the active segment: with the broker's
// default segment (7 days or 1 GiB) a replica that starts reads every
// rewrite since the segment rolled before it is synced. Rolling every 10
// minutes bounds that read to about 10 minutes of writes plus the
// compacted state. A topic that already exists keeps the settings its
// operator gave it.
var topicConfigs = map[string]*string{
	"cleanup.policy": kadm.StringPtr("compact"),
	"segment.ms":     kadm.StringPtr("600000"),
}

func (k *kafkaChannel) create(ctx context.Context, cl *kgo.Client) error {
	r, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, topicConfigs, k.topic)
	if err == nil {
		err = r.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("lease state topic %q: %w", k.topic, err)
	}
	return nil
}

func (k *kafkaChannel) writer(ctx context.Context) (*kgo.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cl != nil {
		return k.cl, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, k.opts...), kgo.DefaultProduceTopic(k.topic))...)
	if err != nil {
		return nil, err
	}
	if err := k.create(ctx, cl); err != nil {
		cl.Close()
		return nil, err
	}
	k.cl = cl
	return cl, nil
}

func (k *kafkaChannel) Put(ctx context.Context, key string, value []byte) error {
	cl, err := k.writer(ctx)
	if err != nil {
		return err
	}
	return cl.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: value}).FirstErr()
}

func (k *kafkaChannel) Delete(ctx context.Context, key string) error {
	return k.Put(ctx, key, nil)
}

func (k *kafkaChannel) Watch(ctx context.Context, f func(string, []byte), synced func()) error {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, k.opts...),
		kgo.ConsumeTopics(k.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := k.create(ctx, cl); err != nil {
		return err
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, k.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("lease state topic %q: end offset: %w", k.topic, err)
	}
	end := int64(0)
	ends.Each(func(o kadm.ListedOffset) { end = max(end, o.Offset) })
	done := end == 0
	if done {
		synced()
	}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil {
			// A fetch error is retried by the client; a fatal one ends here.
			var fe *kgo.ErrFirstReadEOF
			if !errors.As(err, &fe) && !kerr.IsRetriable(err) {
				return fmt.Errorf("lease state topic %q: %w", k.topic, err)
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			var v []byte
			if len(r.Value) > 0 {
				v = r.Value
			}
			f(string(r.Key), v)
			if !done && r.Offset+1 >= end {
				done = true
				synced()
			}
		})
	}
}

// Close closes the writer. Idempotent.
func (k *kafkaChannel) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cl != nil {
		k.cl.Close()
		k.cl = nil
	}
}
