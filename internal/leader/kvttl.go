package leader

import (
	"context"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KeyTTL is the time to live of a key that its writer renews within
// session: session rounded up to whole seconds (the server counts a
// message's time to live in whole seconds and truncates the rest), at
// least one second. Rounding up keeps the key at least as long as its
// writer's local lease (four fifths of session) and at most a second
// longer than session.
func KeyTTL(session time.Duration) time.Duration {
	ttl := session.Truncate(time.Second)
	if ttl < session || ttl < time.Second {
		ttl += time.Second
	}
	return ttl
}

// OpenTTLBucket creates or adopts the KV bucket named bucket, whose keys
// expire one by one after the time to live their writer gave them
// (PutTTL, or Create with jetstream.KeyTTL), not after an age set on the
// whole bucket: replicas and deployments with different sessions never
// cut each other's keys short. The bucket keeps one revision per key and
// no age limit; a key that expires leaves a delete marker for a second.
// Per-key times to live need nats-server 2.11 or later (CheckServer).
func OpenTTLBucket(ctx context.Context, js jetstream.JetStream, bucket, description string) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, LimitMarkerTTL: time.Second,
		Description: description})
	if err != nil {
		return nil, fmt.Errorf("bucket %q: %w", bucket, err)
	}
	return kv, nil
}

// PutTTL writes value under key in kv (a bucket of OpenTTLBucket), to
// expire after ttl unless written again. rev > 0 makes it a compare and
// set: the server refuses the write (jetstream.ErrKeyExists, as
// KeyValue.Update) unless rev is still the key's last revision. It
// returns the new revision.
func PutTTL(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, value []byte, ttl time.Duration, rev uint64) (uint64, error) {
	m := natsgo.NewMsg("$KV." + kv.Bucket() + "." + key)
	m.Data = value
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(ttl)}
	if rev > 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
	}
	ack, err := js.PublishMsg(ctx, m, opts...)
	if wrongRevision(err) {
		return 0, fmt.Errorf("%w: %w", jetstream.ErrKeyExists, err)
	}
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}
