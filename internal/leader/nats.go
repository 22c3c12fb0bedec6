package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/groupmember"
)

// DefaultBucket is the NATS KV bucket of elections.
const DefaultBucket = "lagbridge_leader"

// NATS elects a leader through a NATS KV key: whoever creates the key
// leads, renewing it by revision compare-and-set every Config.Every; the
// bucket's entries expire after Config.Session, so a leader that stops
// renewing loses the key and the first follower to create it again leads.
// The epoch is the revision of that creation (the bucket's stream
// sequence: it only grows).
type NATS struct {
	cfg    Config
	js     jetstream.JetStream
	bucket string
	kv     jetstream.KeyValue
	op     sync.Mutex // one round or Release at a time
	rev    uint64     // the revision this replica last wrote; 0: not leading
	// released: Release was called; the replica no longer runs for leader.
	released bool
	// stopped is closed by Release: Run returns.
	stopped chan struct{}
	lease
}

// NewNATS returns the elector; bucket "" means DefaultBucket.
func NewNATS(js jetstream.JetStream, bucket string, cfg Config) *NATS {
	if bucket == "" {
		bucket = DefaultBucket
	}
	n := &NATS{cfg: cfg, js: js, bucket: bucket, stopped: make(chan struct{})}
	n.onRole = logRole(cfg)
	return n
}

// Cluster implements Elector.
func (n *NATS) Cluster() string { return n.cfg.Cluster }

// Leading implements Elector.
func (n *NATS) Leading(now time.Time) (int64, bool) { return n.leading(now) }

// Role implements Elector.
func (n *NATS) Role(now time.Time) Role { return n.role(now) }

// Run implements Elector: until ctx is done or Release was called. Errors
// reaching NATS are retried every Config.Every; the local lease runs out
// meanwhile.
func (n *NATS) Run(ctx context.Context) error {
	groupmember.Rounds(ctx, n.stopped, n.cfg.every(), func() {
		if err := n.round(ctx); err != nil && ctx.Err() == nil {
			n.cfg.log().Warn("leader election", "cluster", n.cfg.Cluster, "err", err)
		}
		n.notify(time.Now()) // a lease that ran out turns into following
	})
	return nil
}

func (n *NATS) round(ctx context.Context) error {
	n.op.Lock()
	defer n.op.Unlock()
	if n.released {
		return nil
	}
	if n.kv == nil {
		kv, err := n.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: n.bucket, History: 1, TTL: n.cfg.Session,
			Description: "lagbridge leader elections: <name> -> replica id, expires after the session timeout"})
		if err != nil {
			return fmt.Errorf("bucket %q: %w", n.bucket, err)
		}
		n.kv = kv
	}
	rctx, cancel := context.WithTimeout(ctx, n.cfg.every())
	defer cancel()
	sent := time.Now()
	if n.rev != 0 {
		rev, err := n.kv.Update(rctx, n.cfg.Name, []byte(n.cfg.ID), n.rev)
		switch {
		case err == nil:
			n.rev = rev
			n.confirm(sent, n.epoch, n.cfg.ttl())
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound):
			n.rev = 0 // someone else took the key: lost
			n.follow(time.Now())
			return nil
		}
		return err
	}
	rev, err := n.kv.Create(rctx, n.cfg.Name, []byte(n.cfg.ID))
	switch {
	case err == nil:
		n.rev = rev
		n.confirm(sent, int64(rev), n.cfg.ttl())
		return nil
	case errors.Is(err, jetstream.ErrKeyExists):
		n.follow(time.Now())
		return nil
	}
	return err
}

// Release implements Elector: it deletes the key if this replica still
// holds it, so a follower takes over at its next try; this replica no
// longer runs for leader, and Run returns.
func (n *NATS) Release(ctx context.Context) {
	n.op.Lock()
	defer n.op.Unlock()
	if !n.released {
		close(n.stopped)
	}
	n.released = true
	if n.rev == 0 || n.kv == nil {
		return
	}
	_ = n.kv.Delete(ctx, n.cfg.Name, jetstream.LastRevision(n.rev))
	n.rev = 0
	n.follow(time.Now())
}
