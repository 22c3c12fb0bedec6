package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/groupmember"
)

// LegacyBucket is the election bucket that every deployment on a NATS
// account shared before each had its own (Bucket): its entries expired
// after the bucket's age limit, which the last replica to start set to its
// own session, so a deployment with a longer session lost its key between
// renewals and two of its replicas led. While it exists, a leader also
// holds its key there (see NATS), so that replicas of an earlier version
// follow it during a rolling upgrade.
const LegacyBucket = "lagbridge_leader"

// Bucket is the KV bucket of the election named name:
// "lagbridge_leader_<name>", one per deployment.
func Bucket(name string) string { return "lagbridge_leader_" + name }

// epochBase is added to the revisions of Bucket to make epochs: the
// epochs of the leaders of LegacyBucket were its revisions, far below
// 2^40 (a million writes a second for twelve days), so a leader elected
// in Bucket is above every one of them and takes the KV fences
// (KVFence) they held.
const epochBase = 1 << 40

// NATS elects a leader through a NATS KV key: whoever creates the key
// Config.Name in the bucket leads, renewing it by revision compare-and-set
// every Config.Every. The key expires after its writer's session
// (KeyTTL(Config.Session), a per-key time to live, so replicas with
// different sessions, of one deployment or of several, never shorten
// each other's), and the first follower to create it again leads. The
// epoch is 2^40 plus the revision of that creation (the bucket's stream
// sequence: it only grows).
//
// Upgrade from the shared LegacyBucket (Config.LegacyBucket): while that
// bucket exists, the replica holding the key in its own bucket leads only
// once it also holds the key Config.Name there (created and renewed as an
// earlier version does), and for no longer than that bucket's age limit
// allows, so an earlier version's replica that leads there keeps the new
// ones following until it stops or loses its key, and follows them after.
// Once this version led, the legacy key stays with it: the next holder of
// the own key takes it over (it is marked, legacyMark), a release leaves
// it to expire, and an earlier version's replica leads again only after
// no replica of this version renewed it for that bucket's age limit
// (whose epochs, below this version's, the KV fences would refuse).
// Each round also checks the server's version (CheckServer): a replica
// connected to a server older than MinNATSServer never leads.
type NATS struct {
	cfg    Config
	js     jetstream.JetStream
	bucket string
	legacy string // Config.LegacyBucket
	kv     jetstream.KeyValue
	lkv    jetstream.KeyValue // the legacy bucket once found; nil: not (yet) found
	op     sync.Mutex         // one round or Release at a time
	rev    uint64             // the revision this replica last wrote; 0: not holding the key
	made   uint64             // the revision that created the key this replica holds
	lrev   uint64             // the same in the legacy bucket
	// released: Release was called; the replica no longer runs for leader.
	released bool
	// stopped is closed by Release: Run returns.
	stopped chan struct{}
	lease
}

// NewNATS returns the elector; bucket "" means Bucket(cfg.Name).
func NewNATS(js jetstream.JetStream, bucket string, cfg Config) *NATS {
	if bucket == "" {
		bucket = Bucket(cfg.Name)
	}
	n := &NATS{cfg: cfg, js: js, bucket: bucket, legacy: cfg.LegacyBucket, stopped: make(chan struct{})}
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
	var fails groupmember.Failures // Rounds calls round on this goroutine
	groupmember.Rounds(ctx, n.stopped, n.cfg.every(), func() {
		if err := n.round(ctx); err != nil && ctx.Err() == nil {
			fails.Fail(n.cfg.log(), "leader election", err, "cluster", n.cfg.Cluster)
		} else if err == nil {
			fails.OK(n.cfg.log(), "leader election", "cluster", n.cfg.Cluster)
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
	if err := CheckServer(n.js.Conn()); err != nil {
		n.follow(time.Now())
		return err
	}
	// A round is a few requests in sequence (more while the legacy
	// bucket exists); the lease counts from the first one's sending, so
	// a round may take a fifth of the session on a distant server.
	rctx, cancel := context.WithTimeout(ctx, max(n.cfg.every(), n.cfg.Session/5))
	defer cancel()
	if n.kv == nil {
		kv, err := OpenTTLBucket(rctx, n.js, n.bucket, "lagbridge leader election: <name> -> replica id, each key expiring after its writer's session")
		if err != nil {
			return err
		}
		n.kv = kv
	}
	sent := time.Now()
	held, err := n.take(rctx)
	if err != nil {
		return err
	}
	if !held {
		n.lrev = 0 // the next holder takes the legacy key over
		n.follow(time.Now())
		return nil
	}
	ttl, ok, err := n.holdLegacy(rctx)
	if err != nil {
		return err
	}
	if !ok {
		n.follow(time.Now()) // an earlier version's replica leads
		return nil
	}
	n.confirm(sent, epochBase+int64(n.made), ttl)
	return nil
}

// take creates the key, or renews it when this replica holds it, and
// reports whether it does.
func (n *NATS) take(ctx context.Context) (bool, error) {
	ttl := KeyTTL(n.cfg.Session)
	if n.rev != 0 {
		rev, err := PutTTL(ctx, n.js, n.kv, n.cfg.Name, []byte(n.cfg.ID), ttl, n.rev)
		switch {
		case err == nil:
			n.rev = rev
			return true, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound):
			n.rev, n.made = 0, 0 // the key expired or another replica took it: lost
			return false, nil
		}
		return false, err
	}
	rev, err := n.kv.Create(ctx, n.cfg.Name, []byte(n.cfg.ID), jetstream.KeyTTL(ttl))
	switch {
	case err == nil:
		n.rev, n.made = rev, rev
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	}
	return false, err
}

// holdLegacy holds the key in the legacy bucket when that bucket exists,
// and returns the local lease the leader may take: Config.ttl, or less
// when the legacy bucket's entries expire sooner. ok is false when
// another replica holds that key.
func (n *NATS) holdLegacy(ctx context.Context) (ttl time.Duration, ok bool, err error) {
	ttl = n.cfg.ttl()
	if n.legacy == "" {
		return ttl, true, nil
	}
	if n.lkv == nil {
		kv, err := n.js.KeyValue(ctx, n.legacy)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return ttl, true, nil // no earlier version on this account (now)
		}
		if err != nil {
			return 0, false, legacyErr(n.legacy, err)
		}
		n.lkv = kv
	}
	st, err := n.lkv.Status(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		n.lkv, n.lrev = nil, 0 // deleted once every deployment was upgraded
		return ttl, true, nil
	}
	if err != nil {
		return 0, false, legacyErr(n.legacy, err)
	}
	val := []byte(legacyMark + n.cfg.ID)
	var rev uint64
	if n.lrev != 0 {
		rev, err = n.lkv.Update(ctx, n.cfg.Name, val, n.lrev)
	} else {
		rev, err = n.lkv.Create(ctx, n.cfg.Name, val)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Held by this version's former leader (it lost or released
			// the key this replica now holds): take it over, so that an
			// earlier version's replica does not lead again.
			if e, gerr := n.lkv.Get(ctx, n.cfg.Name); gerr == nil && strings.HasPrefix(string(e.Value()), legacyMark) {
				rev, err = n.lkv.Update(ctx, n.cfg.Name, val, e.Revision())
			}
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		n.lrev = 0
		return 0, false, nil
	case err != nil:
		return 0, false, legacyErr(n.legacy, err)
	}
	n.lrev = rev
	if age := st.TTL(); age > 0 {
		ttl = min(ttl, age-age/5)
	}
	return ttl, true, nil
}

// legacyErr says what to do when the legacy bucket cannot be reached.
func legacyErr(bucket string, err error) error {
	return fmt.Errorf("the bucket of earlier versions %q (held during a rolling upgrade; with no earlier version on this account, ha.ignoreLegacyBuckets: true skips it): %w", bucket, err)
}

// legacyMark starts the value this version writes under the legacy key:
// a replica that holds the key of its own bucket takes a legacy key so
// marked over, however recently renewed (earlier versions write the bare
// replica id, which a host or pod name never starts with this).
const legacyMark = "per-deployment-election "

// Release implements Elector: it deletes the key if this replica still
// holds it, so a follower takes over at its next try; this replica no
// longer runs for leader, and Run returns. The legacy key stays, for the
// next leader to take over (or to expire): an earlier version's replica
// does not lead again while this version's run.
func (n *NATS) Release(ctx context.Context) {
	n.op.Lock()
	defer n.op.Unlock()
	if !n.released {
		close(n.stopped)
	}
	n.released = true
	n.lrev = 0
	if n.rev == 0 || n.kv == nil {
		return
	}
	// A purge marker that expires: nothing is left of a released key.
	_ = n.kv.Purge(ctx, n.cfg.Name, jetstream.LastRevision(n.rev), jetstream.PurgeTTL(time.Second))
	n.rev, n.made = 0, 0
	n.lease.mu.Lock()
	n.lease.released = true
	n.lease.mu.Unlock()
	n.follow(time.Now())
}
