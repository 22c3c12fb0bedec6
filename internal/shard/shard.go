// Package shard splits the observation of one watched cluster across the
// lagbridge replicas. A cluster's topics (Kafka) or streams (NATS) fall into
// a fixed number of shards by a stable hash of their name ([Of]); the
// replicas agree on who observes which shard through the cluster itself,
// never through a store of lagbridge's own: on Kafka they join a consumer
// group on a topic with one partition per shard and observe the shards of
// the partitions they are assigned; on NATS each replica keeps a key in a KV
// bucket whose entries expire after the session timeout, and every shard
// goes to the live replica that ranks first for it (rendezvous hashing). A
// replica that joins or leaves moves shards within one session timeout (at
// once on a graceful leave).
//
// All consumer groups of a topic are in the topic's shard, so the replica
// that owns a shard decides for whole topics; the per-topic decisions of
// every shard travel between replicas ([Exchange]) so that the leader
// publishes leases for every topic.
//
// It imports the broker clients; nothing imports it but internal/app.
package shard

import (
	"context"
	"hash/fnv"
	"slices"
	"sync"
	"time"
)

// Of returns the shard of name among n shards: the FNV-1a 32-bit hash of
// the name modulo n, stable across replicas, restarts and versions. n <= 1
// puts every name in shard 0.
func Of(name string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}

// Assigner is one cluster's shard assignment as a replica sees it. Safe for
// concurrent use.
type Assigner interface {
	// Owned returns the shards this replica observes at now, sorted, and
	// whether the assignment has answered yet (before: none owned).
	Owned(now time.Time) (shards []int, synced bool)
	// Owners returns, per shard, the replica id that observes it as far
	// as this replica knows ("" unknown).
	Owners() []string
	// Run takes part in the assignment until ctx is done or Release was
	// called.
	Run(ctx context.Context) error
	// Release leaves the assignment at once so the others take this
	// replica's shards over without waiting for the session timeout; call
	// it while Run runs, on a graceful stop: Run returns. Idempotent.
	Release(ctx context.Context)
	// Cluster names the watched cluster; Count is the number of shards.
	Cluster() string
	Count() int
}

// Config is what both assigners share.
type Config struct {
	// Cluster names the watched cluster (logs, metrics).
	Cluster string
	// ID names this replica; unique among the replicas.
	ID string
	// Name is the assignment's name: the Kafka group and topic
	// ("<Name>.shards.<Count>"), the NATS bucket (Bucket(Name)) and key
	// prefix. Replicas with the same Name and Count share the shards.
	Name string
	// Count is the number of shards, at least 1.
	Count int
	// Session is how long a silent replica keeps its shards (Kafka's
	// session timeout, the NATS key's time to live).
	Session time.Duration
	// Every is how often a replica confirms its place; at most Session/3
	// (and that when zero).
	Every time.Duration
	// LegacyBucket, on NATS, is the bucket of shard members that earlier
	// versions shared (LegacyBucket): while it exists a replica registers
	// there too and counts its members. "" skips it. Ignored on Kafka.
	LegacyBucket string
	// OnChange, when set, is called with the owned shards whenever they
	// change (from the assigner's goroutines).
	OnChange func(owned []int)
}

func (c Config) every() time.Duration {
	if c.Every <= 0 || c.Every > c.Session/3 {
		return c.Session / 3
	}
	return c.Every
}

// owned is the local view shared by both assigners, and their common
// methods.
type owned struct {
	cfg    Config
	mu     sync.Mutex
	synced bool
	shards []int     // sorted
	owners []string  // per shard
	until  time.Time // zero: no expiry (Kafka: the group says when it ends)
	notify func([]int)
	last   []int
	told   bool // notify was called once since the first answer
}

// Cluster implements Assigner.
func (o *owned) Cluster() string { return o.cfg.Cluster }

// Count implements Assigner.
func (o *owned) Count() int { return o.cfg.Count }

// Owned implements Assigner.
func (o *owned) Owned(now time.Time) ([]int, bool) { return o.get(now) }

// Owners implements Assigner.
func (o *owned) Owners() []string { return o.ownersCopy(o.cfg.Count) }

func (o *owned) get(now time.Time) ([]int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.until.IsZero() && !now.Before(o.until) {
		return nil, o.synced
	}
	return slices.Clone(o.shards), o.synced
}

// store records the assignment; the caller notifies with changed.
func (o *owned) store(shards []int, owners []string, until time.Time) {
	slices.Sort(shards)
	o.mu.Lock()
	o.synced, o.shards, o.owners, o.until = true, shards, owners, until
	o.mu.Unlock()
}

// changed calls notify when the shards owned at now differ from the last
// ones notified, and at the first answer of the assignment whatever it
// says: a replica assigned no shard from the start is told so (an empty
// set equals the nil it started from), and lagbridge_ha_shards_owned
// reads 0 instead of the -1 of "not answered yet" for as long as it runs.
func (o *owned) changed(now time.Time) {
	cur, synced := o.get(now)
	o.mu.Lock()
	f, diff := o.notify, !slices.Equal(cur, o.last) || synced && !o.told
	o.last = cur
	o.told = o.told || synced
	o.mu.Unlock()
	if diff && f != nil {
		f(cur)
	}
}

func (o *owned) ownersCopy(n int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, n)
	copy(out, o.owners)
	return out
}
