package shard

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lagbridge/lagbridge/internal/groupmember"
	"github.com/lagbridge/lagbridge/internal/leader"
)

// LegacyBucket is the bucket of shard members that every deployment on a
// NATS account shared before each had its own (Bucket), whose entries
// expired after the last starter's session. While it exists, a replica
// also keeps its key there and counts the members listed there (see
// NATS), so that replicas of an earlier version and this one compute the
// same owners during a rolling upgrade.
const LegacyBucket = "lagbridge_shards"

// Bucket is the KV bucket of the shard members of the deployment whose
// ha.name is name: "lagbridge_shards_<name>".
func Bucket(name string) string { return "lagbridge_shards_" + name }

// NATS assigns shards through a NATS KV bucket: every replica puts the key
// "<Name>.<Count>.<hex id>" every Config.Every, expiring after its own
// session (leader.KeyTTL, a per-key time to live: replicas with different
// sessions never shorten each other's), and lists the keys under
// "<Name>.<Count>."; those are the live replicas, and every replica
// computes the same owners from them ([Rendezvous]: balanced rendezvous
// hashing), so a replica that joins or leaves moves its share of the
// shards and few others. A replica that stops renewing its key drops out
// of every list when the key expires; it stops observing its own shards a
// fifth of the session before that, by its clock. While
// Config.LegacyBucket exists, a replica also puts its key there (with that bucket's expiry)
// and adds the members listed there to its own bucket's.
type NATS struct {
	js     jetstream.JetStream
	bucket string
	legacy string // Config.LegacyBucket
	log    *slog.Logger
	prefix string

	op       sync.Mutex // one round or Release at a time
	kv       jetstream.KeyValue
	lkv      jetstream.KeyValue // the legacy bucket once found
	released bool
	stopped  chan struct{} // closed by Release: Run returns
	owned
}

// NewNATS returns the assigner; bucket "" means Bucket(cfg.Name), log nil
// slog.Default().
func NewNATS(js jetstream.JetStream, bucket string, cfg Config, log *slog.Logger) *NATS {
	if bucket == "" {
		bucket = Bucket(cfg.Name)
	}
	if log == nil {
		log = slog.Default()
	}
	n := &NATS{js: js, bucket: bucket, legacy: cfg.LegacyBucket, log: log, prefix: cfg.Name + "." + strconv.Itoa(cfg.Count) + ".", stopped: make(chan struct{})}
	n.cfg, n.notify = cfg, cfg.OnChange
	return n
}

// Run implements Assigner, until ctx is done or Release was called;
// errors reaching NATS are retried every Config.Every while the local
// view of the shards runs out.
func (n *NATS) Run(ctx context.Context) error {
	groupmember.Rounds(ctx, n.stopped, n.cfg.every(), func() {
		if err := n.round(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("shard assignment", "cluster", n.cfg.Cluster, "err", err)
		}
		n.changed(time.Now())
	})
	return nil
}

func (n *NATS) round(ctx context.Context) error {
	n.op.Lock()
	defer n.op.Unlock()
	if n.released {
		return nil
	}
	if err := leader.CheckServer(n.js.Conn()); err != nil {
		return err
	}
	// A round is a few requests in sequence (more while the legacy
	// bucket exists); the lease counts from the first one's sending, so
	// a round may take a fifth of the session on a distant server.
	rctx, cancel := context.WithTimeout(ctx, max(n.cfg.every(), n.cfg.Session/5))
	defer cancel()
	if n.kv == nil {
		kv, err := leader.OpenTTLBucket(rctx, n.js, n.bucket, "lagbridge shard members: <name>.<shards>.<hex replica id>, each key expiring after its writer's session")
		if err != nil {
			return err
		}
		n.kv = kv
	}
	sent := time.Now()
	key := n.prefix + hex.EncodeToString([]byte(n.cfg.ID))
	if _, err := leader.PutTTL(rctx, n.js, n.kv, key, []byte(n.cfg.ID), leader.KeyTTL(n.cfg.Session), 0); err != nil {
		return err
	}
	members, err := n.members(rctx, n.kv)
	if err != nil {
		return err
	}
	more, err := n.legacyMembers(rctx, key)
	if err != nil {
		return err
	}
	owners := Rendezvous(append(members, more...), n.cfg.Count)
	var mine []int
	for s, id := range owners {
		if id == n.cfg.ID {
			mine = append(mine, s)
		}
	}
	n.store(mine, owners, sent.Add(n.cfg.Session-n.cfg.Session/5))
	return nil
}

// members lists the replica ids whose keys kv holds under the prefix.
func (n *NATS) members(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	lister, err := kv.ListKeysFiltered(ctx, n.prefix+"*")
	if err != nil {
		return nil, err
	}
	var members []string
	for k := range lister.Keys() {
		id, err := hex.DecodeString(strings.TrimPrefix(k, n.prefix))
		if err != nil {
			continue
		}
		members = append(members, string(id))
	}
	// The lister stops by itself once every key is read.
	return members, nil
}

// legacyMembers puts key in the legacy bucket, when it exists, and lists
// the members there: an earlier version's replicas, and this version's.
func (n *NATS) legacyMembers(ctx context.Context, key string) ([]string, error) {
	if n.legacy == "" {
		return nil, nil
	}
	if n.lkv == nil {
		kv, err := n.js.KeyValue(ctx, n.legacy)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil // no earlier version on this account (now)
		}
		if err != nil {
			return nil, legacyErr(n.legacy, err)
		}
		n.lkv = kv
	}
	_, err := n.lkv.Put(ctx, key, []byte(n.cfg.ID))
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		n.lkv = nil // deleted once every deployment was upgraded
		return nil, nil
	}
	if err != nil {
		return nil, legacyErr(n.legacy, err)
	}
	return n.members(ctx, n.lkv)
}

// legacyErr says what to do when the legacy bucket cannot be reached.
func legacyErr(bucket string, err error) error {
	return fmt.Errorf("the bucket of earlier versions %q (counted during a rolling upgrade; with no earlier version on this account, ha.ignoreLegacyBuckets: true skips it): %w", bucket, err)
}

// Rendezvous returns the owner of each of count shards among members,
// balanced: every member owns count/len(members) shards, rounded up or
// down. Shard by shard, the owner is the member that ranks first by the
// hash of "<member>/<shard>" (FNV-1a through a finalizer; ties to the
// smaller id) among those not yet at their share. Every replica computes
// the same owners from the same members; a member that joins or leaves
// moves its share and few others. With no members every owner is "".
func Rendezvous(members []string, count int) []string {
	owners := make([]string, count)
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	if len(members) == 0 {
		return owners
	}
	// The first count%len(members) members by rank of the shard that
	// fills them get one shard more: shares are filled in shard order.
	base, extra := count/len(members), count%len(members)
	load := make(map[string]int, len(members))
	type ranked struct {
		m string
		h uint64
	}
	rank := make([]ranked, len(members))
	for s := range owners {
		for i, m := range members {
			h := fnv.New64a()
			_, _ = h.Write([]byte(m + "/" + strconv.Itoa(s)))
			rank[i] = ranked{m, mix(h.Sum64())}
		}
		slices.SortStableFunc(rank, func(a, b ranked) int {
			switch {
			case a.h > b.h:
				return -1
			case a.h < b.h:
				return 1
			}
			return 0
		})
		for _, r := range rank {
			share := base
			if extra > 0 {
				share++
			}
			if load[r.m] < share {
				owners[s] = r.m
				load[r.m]++
				if load[r.m] == base+1 {
					extra--
				}
				break
			}
		}
	}
	return owners
}

// Release implements Assigner: it deletes this replica's key (and the
// legacy one), so the others take its shards over at their next round;
// Run returns.
func (n *NATS) Release(ctx context.Context) {
	n.op.Lock()
	if !n.released {
		close(n.stopped)
	}
	n.released = true
	kv, lkv := n.kv, n.lkv
	n.store(nil, n.Owners(), time.Time{})
	n.op.Unlock()
	n.changed(time.Now())
	key := n.prefix + hex.EncodeToString([]byte(n.cfg.ID))
	if kv != nil {
		// A purge marker that expires: a replica id used once (a
		// Deployment's pod name) leaves nothing behind.
		_ = kv.Purge(ctx, key, jetstream.PurgeTTL(time.Second))
	}
	if lkv != nil {
		_ = lkv.Delete(ctx, key)
	}
}

// mix is MurmurHash3's 64-bit finalizer: every input bit moves every
// output bit.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb53a83b6ae53
	h ^= h >> 33
	return h
}
