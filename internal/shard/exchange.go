package shard

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// Channel is the replicated map the decisions travel through
// (internal/replica's channel: the lease state's NATS KV bucket or
// compacted Kafka topic). Safe for concurrent use.
type Channel interface {
	Put(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	Watch(ctx context.Context, f func(key string, value []byte), synced func()) error
}

// Engine is what the exchange needs from the quota engine
// (*engine.Engine).
type Engine interface {
	// ClusterDecisions returns this replica's own decisions of a cluster.
	ClusterDecisions(cluster string) map[lag.Target]quota.Decision
	// SetRemote replaces the decisions of a source (nil: removes it).
	SetRemote(source string, ds []quota.Decision)
}

// ExchangeConfig builds an Exchange.
type ExchangeConfig struct {
	Channel Channel
	Engine  Engine
	// ID is this replica's id, written as each record's owner.
	ID string
	// Expire is how long another replica's record of a shard counts
	// without being rewritten: past it (its owner is gone and no new
	// owner wrote yet) the shard's topics get the open lease of a topic
	// nobody observes. At least the session timeout plus one interval.
	Expire time.Duration
	// Interval is how often a failed watch is retried.
	Interval time.Duration
	// Silence, when positive, is how long the assigned owner of a shard
	// may write no record of it before another replica stands in: it
	// observes the shard and writes its records until the owner writes
	// again or the assignment names another owner (see Observers). Zero:
	// a shard waits for the assignment alone. Set it well under the
	// session timeout and over a few intervals.
	Silence time.Duration
	// Beat, when positive, is how often this replica writes its
	// heartbeat for each cluster: a record of no shard (shard -1, under
	// its own key "h.<cluster>/<id>", see beatKey), so that the others
	// tell it alive while its cycles are slow, and silent only when it
	// is gone or paused; and how often it deletes the heartbeat keys of
	// replicas gone (see forget). Zero: its shards' records alone tell.
	Beat time.Duration
	// Now is the clock of the records' receipt and of the heartbeats;
	// nil means time.Now.
	Now func() time.Time
	// OnStandIn, when set, is called from Offer with the cluster's
	// shards this replica stands in for whenever they change.
	OnStandIn func(cluster string, shards []int)
	Log       *slog.Logger
}

// Exchange carries the decisions of each shard from the replica that
// observes it to every other one: after each cycle of a cluster (Offer)
// the replica writes, per shard it owns, the decisions of its targets
// under the key "d.<cluster>/<shard>"; every replica reads the others'
// records and gives them to its engine (Engine.SetRemote), for the shards
// it does not own, while they are fresh. So every replica, the leader
// included, leases every topic of the cluster. Create it with
// NewExchange, add the assigners with Add, then Start; Close stops it.
// Safe for concurrent use.
type Exchange struct {
	cfg       ExchangeConfig
	assigners map[string]Assigner // by cluster; set before Start

	mu      sync.Mutex
	pending map[string][]byte // key -> encoded record, the newest
	// remote holds the newest record read per key and shard count
	// (remoteKey), this replica's included.
	remote map[string]Record
	// owned holds, by cluster, the shards owned at the last Offer.
	owned map[string][]int
	// gained holds, by remoteKey, when each of those was gained.
	gained map[string]time.Time
	fed    map[string]fedRecord // keys given to the engine
	// heard is when each writer's records of each shard were last read
	// (this replica's clock), since the replica that stands in for a
	// silent owner is chosen by it; since is when the assigned owner of
	// each shard was first seen (remoteKey); standing holds, by cluster,
	// the shards this replica stood in for at the last Offer.
	heard    map[heardKey]*heardAt
	since    map[string]assignedAt
	standing map[string][]int
	// beats holds the heartbeat keys read (beatKey, and the shared key of
	// earlier versions), by when each was last read, until deleted.
	beats   map[string]beatRead
	synced  bool
	started time.Time // when Start ran
	kick    chan struct{}

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// beatRead is when a heartbeat key was last read (this replica's clock)
// and its writer.
type beatRead struct {
	at    time.Time
	owner string
}

// fedRecord is the cluster and time of a record given to the engine.
type fedRecord struct {
	cluster string
	at      time.Time
}

// Record is one shard's decisions as written by its owner.
type Record struct {
	Owner   string `json:"owner"`
	Cluster string `json:"cluster"`
	Shard   int    `json:"shard"`
	Count   int    `json:"count"`
	// At is the cycle the decisions were made in.
	At        time.Time        `json:"at"`
	Decisions []quota.Decision `json:"decisions"`
}

// NewExchange returns an exchange; it starts nothing.
func NewExchange(cfg ExchangeConfig) *Exchange {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Exchange{cfg: cfg, assigners: map[string]Assigner{}, pending: map[string][]byte{}, remote: map[string]Record{},
		fed: map[string]fedRecord{}, owned: map[string][]int{}, gained: map[string]time.Time{}, heard: map[heardKey]*heardAt{}, since: map[string]assignedAt{},
		standing: map[string][]int{}, beats: map[string]beatRead{}, kick: make(chan struct{}, 1), stop: func() {}}
}

// Add makes the cluster's shards travel; call it before Start.
func (x *Exchange) Add(a Assigner) { x.assigners[a.Cluster()] = a }

// recordKey is the channel key of a cluster's shard; it parses as a lease
// state key of kind "d".
func recordKey(cluster string, shard int) string {
	return quotaproto.KVKey("d", cluster+"/"+strconv.Itoa(shard))
}

// remoteKey is the key of Exchange.remote: a channel key and a shard
// count. During a rolling change of ha.shards the replicas of either
// count write the same channel keys (shard 1 of 2 and shard 1 of 4 are
// both "d.<cluster>/1"); each count's newest record is kept, so the other
// count's writes never displace the records a replica is given.
func remoteKey(key string, count int) string { return key + "#" + strconv.Itoa(count) }

// Offer writes, for every shard of cluster this replica owned at the
// previous Offer and still owns at now, the engine's decisions of the
// targets in it (in the background), and gives the engine every fresh
// record of the cluster: the engine decides by its own decisions where it
// has them. A shard gained since the previous Offer is written from the
// next one on: the cycle that just ended may have started before the shard
// was this replica's, and an empty record would replace its former
// owner's decisions. Where the engine does not know a target's rates yet
// (quota.RuleRatesUnknown: it has just begun to observe it), the former
// owner's decision is written instead while younger than Expire, so that
// a shard that moves does not open its topics for the cycles its new
// owner needs to learn the rates. The shards this replica stands in for
// (Observers) count as owned, from this Offer to the next. Until the
// channel was read once (Synced; for at most Expire after Start) no shard
// counts as owned: the shard's last record is not known yet, and a record
// written then (a replica that restarts and owns its shard again at once,
// its engine without rates) would open the shard's topics in every
// replica's leases and leave no former decision to hold. Call it after
// each of the cluster's cycles, once the engine has the cycle.
func (x *Exchange) Offer(cluster string, now time.Time) {
	a, ok := x.assigners[cluster]
	if !ok {
		return
	}
	owned, _ := a.Owned(now)
	n := a.Count()
	x.mu.Lock()
	var stand []int
	if x.synced || now.Sub(x.started) >= x.cfg.Expire {
		stand = x.standIns(a, now)
	} else {
		owned = nil
	}
	standChanged := !slices.Equal(stand, x.standing[cluster])
	x.standing[cluster] = stand
	for _, s := range stand {
		if !slices.Contains(owned, s) {
			owned = append(owned, s)
		}
	}
	slices.Sort(owned)
	before := x.owned[cluster]
	x.owned[cluster] = owned
	for s := range n {
		rk := remoteKey(recordKey(cluster, s), n)
		switch {
		case !slices.Contains(owned, s):
			delete(x.gained, rk)
		case !slices.Contains(before, s):
			x.gained[rk] = now
		}
	}
	x.mu.Unlock()
	if standChanged && x.cfg.OnStandIn != nil {
		x.cfg.OnStandIn(cluster, stand)
	}
	byShard := map[int][]quota.Decision{}
	for _, s := range owned {
		if slices.Contains(before, s) {
			byShard[s] = nil // an owned shard without decisions is written too
		}
	}
	for t, d := range x.cfg.Engine.ClusterDecisions(cluster) {
		s := Of(t.Topic, n)
		if _, mine := byShard[s]; mine {
			byShard[s] = append(byShard[s], d)
		}
	}
	x.mu.Lock()
	for s, ds := range byShard {
		rk := remoteKey(recordKey(cluster, s), n)
		byShard[s] = x.holdFormer(rk, ds, now.Sub(x.gained[rk]) < x.cfg.Expire, now)
	}
	feed := map[string][]quota.Decision{}
	for k, r := range x.remote {
		if r.Cluster != cluster {
			continue
		}
		f, fed := x.fed[k]
		switch {
		case r.Count == n && now.Sub(r.At) < x.cfg.Expire:
			if !fed || !f.at.Equal(r.At) { // a record is given once
				feed[k] = r.Decisions
				x.fed[k] = fedRecord{cluster, r.At}
			}
		case fed:
			feed[k] = nil
			delete(x.fed, k)
		}
	}
	for k, f := range x.fed { // a record deleted from the channel
		if _, ok := x.remote[k]; !ok && f.cluster == cluster {
			feed[k] = nil
			delete(x.fed, k)
		}
	}
	x.mu.Unlock()
	encoded := make(map[string][]byte, len(byShard))
	for s, ds := range byShard {
		slices.SortFunc(ds, func(a, b quota.Decision) int { return strings.Compare(a.Target.String(), b.Target.String()) })
		b, err := encodeRecord(Record{Owner: x.cfg.ID, Cluster: cluster, Shard: s, Count: n, At: now, Decisions: ds})
		if err != nil {
			x.cfg.Log.Warn("shard decisions not written", "cluster", cluster, "shard", s, "err", err)
			continue
		}
		encoded[recordKey(cluster, s)] = b
	}
	x.mu.Lock()
	maps.Copy(x.pending, encoded)
	x.mu.Unlock()
	for k, ds := range feed {
		x.cfg.Engine.SetRemote(k, ds)
	}
	if len(byShard) > 0 {
		select {
		case x.kick <- struct{}{}:
		default:
		}
	}
}

// holdFormer replaces, in ds, each decision made without rates by the
// decision of the same target in the shard's last record, when that one
// was made with rates less than Expire before now. For a shard gained
// (owned, or stood in for) less than Expire ago it also adds the last
// record's decisions, so made, of the targets ds lacks: the new
// observer's first cycles may not reach every target of the shard yet (a
// cycle that timed out, a group not described yet), and a record without
// them would drop them from every replica's leases. Called with x.mu
// held.
func (x *Exchange) holdFormer(key string, ds []quota.Decision, gained bool, now time.Time) []quota.Decision {
	prev, ok := x.remote[key]
	if !ok {
		return ds
	}
	var former map[lag.Target]quota.Decision
	for _, d := range prev.Decisions {
		if d.Rule != quota.RuleRatesUnknown && now.Sub(d.At) < x.cfg.Expire {
			if former == nil {
				former = map[lag.Target]quota.Decision{}
			}
			former[d.Target] = d
		}
	}
	for i, d := range ds {
		if f, ok := former[d.Target]; ok && d.Rule == quota.RuleRatesUnknown {
			ds[i] = f
		}
		delete(former, d.Target)
	}
	if gained {
		for _, f := range former {
			ds = append(ds, f)
		}
	}
	return ds
}

// Remote returns the newest record read of a shard of the cluster's
// shard count (this replica's own included), and whether there is one.
func (x *Exchange) Remote(cluster string, shard int) (Record, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	if a, ok := x.assigners[cluster]; ok {
		n = a.Count()
	}
	r, ok := x.remote[remoteKey(recordKey(cluster, shard), n)]
	return r, ok
}

// Synced reports whether the channel was read once.
func (x *Exchange) Synced() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.synced
}

// Start reads the channel and writes the records until Close: two
// goroutines, and a third that writes the heartbeats (ExchangeConfig.Beat).
func (x *Exchange) Start(ctx context.Context) {
	ctx, x.stop = context.WithCancel(ctx)
	x.mu.Lock()
	x.started = x.cfg.Now()
	x.mu.Unlock()
	if x.cfg.Beat > 0 {
		x.wg.Go(func() { x.beat(ctx) })
	}
	x.wg.Go(func() {
		for {
			err := x.cfg.Channel.Watch(ctx, x.apply, func() {
				x.mu.Lock()
				x.synced = true
				x.mu.Unlock()
			})
			if ctx.Err() != nil {
				return
			}
			x.cfg.Log.Warn("reading the shards' decisions", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(x.cfg.Interval):
			}
		}
	})
	x.wg.Go(func() {
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-x.kick:
			}
			x.mu.Lock()
			batch := x.pending
			x.pending = map[string][]byte{}
			x.mu.Unlock()
			for _, k := range slices.Sorted(maps.Keys(batch)) {
				pctx, cancel := context.WithTimeout(ctx, max(x.cfg.Interval, 2*time.Second))
				err := x.cfg.Channel.Put(pctx, k, batch[k])
				cancel()
				switch {
				case err != nil && ctx.Err() == nil && !failing:
					x.cfg.Log.Warn("writing a shard's decisions for the other replicas", "key", k, "err", err)
					failing = true
				case err == nil && failing:
					x.cfg.Log.Info("writing the shards' decisions recovered")
					failing = false
				}
			}
		}
	})
}

// Close stops the goroutines and waits for them. Idempotent.
func (x *Exchange) Close() {
	x.stop()
	x.wg.Wait()
}

// apply is one entry of the channel: records of kind "d" are kept, the
// newest per key. This replica's own count too: once it lost a shard, its
// last decisions serve until the next owner writes. Heartbeats (kind "h",
// or shard -1 under the shared key of earlier versions) are heard.
func (x *Exchange) apply(k string, v []byte) {
	kind, _, err := quotaproto.ParseKVKey(k)
	if err != nil || kind != "d" && kind != kindBeat {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if v == nil {
		delete(x.beats, k)
		for rk := range x.remote {
			if strings.HasPrefix(rk, k+"#") {
				delete(x.remote, rk)
			}
		}
		return
	}
	r, err := decodeRecord(v)
	if err == nil && kind == kindBeat && (r.Shard != -1 || beatKey(r.Cluster, r.Owner) != k) {
		err = fmt.Errorf("heartbeat of %s (shard %d) under another key", r.Owner, r.Shard)
	}
	if err != nil || kind == "d" && recordKey(r.Cluster, r.Shard) != k {
		x.cfg.Log.Warn("shard decisions ignored", "key", k, "err", err)
		return
	}
	x.hear(r)
	if r.Shard < 0 {
		x.beats[k] = beatRead{at: x.cfg.Now(), owner: r.Owner}
		return // a heartbeat
	}
	rk := remoteKey(k, r.Count)
	if cur, ok := x.remote[rk]; ok && cur.At.After(r.At) {
		return // a paused former owner's late write
	}
	x.remote[rk] = r
}

// encodeRecord is gzip'd JSON: a shard of thousands of decisions fits a
// NATS message (1 MiB by default).
func encodeRecord(r Record) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(r); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// maxRecord bounds a decoded record, against a corrupt or hostile entry.
const maxRecord = 64 << 20

func decodeRecord(b []byte) (Record, error) {
	var r Record
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return r, fmt.Errorf("shard record: %w", err)
	}
	if err := json.NewDecoder(io.LimitReader(zr, maxRecord)).Decode(&r); err != nil {
		return r, fmt.Errorf("shard record: %w", err)
	}
	return r, nil
}
