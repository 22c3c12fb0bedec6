package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
)

// A killed replica keeps its shards in the assignment until its session
// runs out (Kafka's group protocol cannot notice a dead member sooner than
// group.min.session.timeout.ms, 6 s by default), and then the others need
// a look at the assignment and a cycle. But every replica writes to the
// lease-state channel every cycle (its shards' records) and every
// interval (a heartbeat), and every replica reads all of it: a replica
// that went silent is noticed by all of them after
// ExchangeConfig.Silence, and for each of its shards one of the others,
// chosen alike by all, stands in (observes it and writes its records)
// until the owner writes again or the assignment moves the shard.

// heardKey is a writer of records (and heartbeats) of a cluster's shard
// count.
type heardKey struct {
	cluster string
	count   int
	owner   string
}

// heardAt is when a writer's record or heartbeat was last read.
type heardAt struct {
	at time.Time // this replica's clock
	// gap is the largest recent interval between two of its writes
	// (decaying by an eighth per write): a writer whose writes come
	// slower than the silence is not taken for silent between two.
	gap time.Duration
}

// assignedAt is a shard's assigned owner and when it was first seen.
type assignedAt struct {
	owner string
	at    time.Time
}

// hear notes that r, a record or a heartbeat, was read. One older than
// the expiry when read (the channel's history read at start) says nothing
// of its writer's life. Called with x.mu held.
func (x *Exchange) hear(r Record) {
	now := x.cfg.Now()
	if x.cfg.Expire > 0 && now.Sub(r.At) >= x.cfg.Expire {
		return
	}
	k := heardKey{r.Cluster, r.Count, r.Owner}
	h, ok := x.heard[k]
	if !ok {
		x.heard[k] = &heardAt{at: now}
		return
	}
	h.gap = max(now.Sub(h.at), h.gap-h.gap/8)
	h.at = now
}

// beatKey is the channel key of a replica's heartbeat of a cluster:
// "h.<cluster>/<id>", one per replica. Earlier versions shared one key per
// cluster (recordKey(cluster, -1)): on a channel that keeps one value per
// key (a NATS KV bucket of history 1, a compacted topic) a reader that
// reads the state rather than every write (it starts, its watch
// restarts, it fell behind) saw only the last writer's beat, and took
// the others for silent. Records under the shared key are still read
// (replicas of an earlier version, during a rolling upgrade); those
// versions ignore keys of kind "h", as every key of a kind they do not
// know.
func beatKey(cluster, id string) string { return quotaproto.KVKey(kindBeat, cluster+"/"+id) }

const kindBeat = "h"

// beat writes this replica's heartbeat of every cluster every
// ExchangeConfig.Beat until ctx is done, and deletes the heartbeat keys
// nobody rewrote for a while (forget).
func (x *Exchange) beat(ctx context.Context) {
	t := time.NewTicker(x.cfg.Beat)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := x.beatOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			x.cfg.Log.Warn("writing this replica's heartbeat for the others", "err", err)
			failing = true
		case err == nil && failing:
			x.cfg.Log.Info("writing the heartbeat recovered")
			failing = false
		}
	}
}

// beatOnce writes this replica's heartbeat of every cluster, then deletes
// the heartbeat keys of the replicas gone (forgotten).
func (x *Exchange) beatOnce(ctx context.Context) error {
	var errs []error
	for _, c := range slices.Sorted(maps.Keys(x.assigners)) {
		b, err := encodeRecord(Record{Owner: x.cfg.ID, Cluster: c, Shard: -1, Count: x.assigners[c].Count(), At: x.cfg.Now()})
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, max(x.cfg.Beat, 2*time.Second))
			err = x.cfg.Channel.Put(pctx, beatKey(c, x.cfg.ID), b)
			cancel()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", c, err))
		}
	}
	for _, k := range x.forgotten() {
		pctx, cancel := context.WithTimeout(ctx, max(x.cfg.Beat, 2*time.Second))
		err := x.cfg.Channel.Delete(pctx, k)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting the heartbeat %s of a replica gone: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// forget is how long a heartbeat key may go unrewritten, as read by this
// replica, before it deletes the key: its replica is gone (an id that
// will not come back: a host name, a scaled-down pod). As long as a
// writer is remembered (observers), and at least ten beats.
func (x *Exchange) forget() time.Duration {
	return max(x.cfg.Expire, 4*x.cfg.Silence, 10*x.cfg.Beat)
}

// forgotten returns the heartbeat keys read and not rewritten for forget
// (this replica's clock; a key read at start counts from then), and
// stops tracking them: each is deleted once (read back as deleted, it is
// not tracked again). This replica's own are never among them.
func (x *Exchange) forgotten() []string {
	now := x.cfg.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []string
	for k, b := range x.beats {
		if now.Sub(b.at) >= x.forget() && b.owner != x.cfg.ID {
			out = append(out, k)
			delete(x.beats, k)
		}
	}
	slices.Sort(out)
	return out
}

// quiet reports whether the writer of h wrote nothing for the silence
// (or twice its recent interval between records, if longer) at now.
func (x *Exchange) quiet(h *heardAt, now time.Time) bool {
	return now.Sub(h.at) >= max(x.cfg.Silence, 2*h.gap)
}

// Observers returns, per shard of cluster, the replica that observes it
// at now as far as this replica knows, and whether that one stands in for
// the assigned owner. A shard's assigned owner (Assigner.Owners; "" if
// none) observes it unless nothing it wrote (a record of any shard, or a
// heartbeat) was read for ExchangeConfig.Silence (or twice its recent
// interval between writes, if longer), counted from when this replica
// first saw it assigned the shard: it was killed or paused, and the
// assignment has not noticed yet. Then the replica that stands in is,
// among the others that the assignment names and whose writes were read
// within the silence, the one that ranks first by the hash of
// "<id>/<shard>" (as in Rendezvous), so every replica names the same one
// from the same records. With no such replica, or no silence configured,
// the assigned owner is named. Safe for concurrent use.
func (x *Exchange) Observers(cluster string, now time.Time) (observers []string, standIn []bool) {
	a, ok := x.assigners[cluster]
	if !ok {
		return nil, nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.observers(a, now)
}

// StandsIn reports whether this replica stood in for the owner of the
// cluster's shard at its last Offer. Safe for concurrent use.
func (x *Exchange) StandsIn(cluster string, shard int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Contains(x.standing[cluster], shard)
}

// standIns returns the shards of a this replica stands in for at now.
// Called with x.mu held.
func (x *Exchange) standIns(a Assigner, now time.Time) []int {
	obs, stand := x.observers(a, now)
	var out []int
	for s, id := range obs {
		if stand[s] && id == x.cfg.ID {
			out = append(out, s)
		}
	}
	return out
}

// observers is Observers with x.mu held.
func (x *Exchange) observers(a Assigner, now time.Time) ([]string, []bool) {
	owners, n, cluster := a.Owners(), a.Count(), a.Cluster()
	stand := make([]bool, len(owners))
	if x.cfg.Silence <= 0 {
		return owners, stand
	}
	// The writers of the cluster's count read within the silence, among
	// those the assignment names; entries long silent are forgotten.
	live := map[string]bool{}
	for k, h := range x.heard {
		switch {
		case now.Sub(h.at) > max(x.cfg.Expire, 4*x.cfg.Silence):
			delete(x.heard, k)
		case k.cluster == cluster && k.count == n && !x.quiet(h, now) && slices.Contains(owners, k.owner):
			live[k.owner] = true
		}
	}
	out := slices.Clone(owners)
	for s, o := range owners {
		rk := remoteKey(recordKey(cluster, s), n)
		since, ok := x.since[rk]
		if !ok || since.owner != o {
			since = assignedAt{o, now}
			x.since[rk] = since
		}
		if live[o] || now.Sub(since.at) < x.cfg.Silence {
			continue // alive, or newly assigned: it has the silence to write
		}
		if id := standInFor(live, o, s); id != "" {
			out[s], stand[s] = id, true
		}
	}
	return out, stand
}

// standInFor returns the replica of live, other than owner, that ranks
// first for shard s ("" if none).
func standInFor(live map[string]bool, owner string, s int) string {
	best, bestH := "", uint64(0)
	for id := range live {
		if id == owner {
			continue
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(id + "/" + strconv.Itoa(s)))
		v := mix(h.Sum64())
		if best == "" || v > bestH || v == bestH && id < best {
			best, bestH = id, v
		}
	}
	return best
}
