package replica

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"time"
)

// A leader that dies leaves its Kafka client quotas on the broker: its
// producers stay throttled to its last figures until a new leader writes
// its own, a session timeout later. The followers stand in for it after
// Config.Silence (their own lease sets), but a lease cannot lift a client
// quota. So, from the moment followers stand in, exactly one of them also
// writes the client quotas: the live replica that ranks first by the hash
// of its ID (rendezvous), every replica naming the same one from the same
// presence records. Every replica writes its presence record (kind "p",
// keyed by its ID) every presenceEvery; a replica is live while its
// newest one is at most Silence older than the newest one read (see
// rankFirst); the silent leader (its ID in its
// decisions records) is not a candidate. The stand-in writes only until the
// lost leader's broker session could end (its last decisions record plus
// the local lease, a fifth short of Config.Session), and not once any
// newer decisions record was read: no new leader can lead before that,
// so the two never write in the same interval.

// kindPresence keys a replica's presence record: "p.<id>".
const kindPresence = "p"

// presenceRecord is a replica's sign of life.
type presenceRecord struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// presenceEvery is how often a replica writes its presence record: four
// times per Silence, at most once per interval.
func (r *Replicator) presenceEvery() time.Duration {
	return max(r.cfg.Interval, r.cfg.Silence/4)
}

// writesPresence reports whether this replica takes part in choosing the
// client quotas' stand-in.
func (r *Replicator) writesPresence() bool {
	return r.cfg.ID != "" && r.cfg.Silence > 0 && r.cfg.Session > 0
}

// presence, on its own goroutine, writes this replica's presence record
// every presenceEvery until ctx is done; the leader also deletes the
// records of replicas gone for longer than the lease lifetime and ten
// silences (their IDs would otherwise stay in the channel for good).
func (r *Replicator) presence(ctx context.Context) {
	t := time.NewTicker(r.presenceEvery())
	defer t.Stop()
	failing := false
	for {
		now := time.Now()
		pctx, cancel := context.WithTimeout(ctx, max(r.presenceEvery(), 2*time.Second))
		err := r.cfg.Channel.Put(pctx, key(kindPresence, r.cfg.ID), encode(presenceRecord{ID: r.cfg.ID, At: now}))
		if err == nil && r.sink.isLeading() {
			err = r.forgetGone(pctx, now)
		}
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			r.cfg.Log.Warn("writing this replica's presence for the others", "err", err)
			failing = true
		case err == nil && failing:
			r.cfg.Log.Info("writing this replica's presence recovered")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// forgetGone deletes the presence records of replicas gone for long.
func (r *Replicator) forgetGone(ctx context.Context, now time.Time) error {
	gone := max(r.cfg.Lifetime, 10*r.cfg.Silence)
	r.mu.Lock()
	var old []string
	for id, at := range r.present {
		if now.Sub(at) > gone {
			old = append(old, id)
		}
	}
	r.mu.Unlock()
	for _, id := range old {
		if err := r.cfg.Channel.Delete(ctx, key(kindPresence, id)); err != nil {
			return err
		}
		r.mu.Lock()
		delete(r.present, id)
		r.mu.Unlock()
	}
	return nil
}

// hearPresence notes a presence record read from the channel (v nil:
// deleted).
func (r *Replicator) hearPresence(id string, v []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v == nil {
		delete(r.present, id)
		return
	}
	var rec presenceRecord
	if err := json.Unmarshal(v, &rec); err != nil || rec.ID != id {
		r.cfg.Log.Warn("replicated lease state: presence ignored", "id", id, "err", err)
		return
	}
	if rec.At.After(r.present[id]) {
		r.present[id] = rec.At
	}
}

// ClientQuotaStandIn reports whether, at now, this replica writes the
// Kafka client quotas of the lease state's cluster although it does not
// lead, and until when at the latest (the writes' deadline): it stands
// in for a leader silent for Config.Silence, no decisions record newer than
// the lost leader's last was read since, the lost leader's broker session
// may not have ended yet, and it ranks first among the live replicas.
// Safe for concurrent use.
func (r *Replicator) ClientQuotaStandIn(now time.Time) (time.Time, bool) {
	if !r.writesPresence() || r.sink.isLeading() || !r.sink.isActing() {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The sets are served after Config.Serve, the client quotas only
	// after Silence: a leader whose record is late still writes them.
	if r.standFrom.IsZero() || !r.lastLeader.Equal(r.standFrom) || now.Sub(r.standFrom) <= r.cfg.Silence {
		return time.Time{}, false
	}
	until := r.standFrom.Add(r.cfg.Session - r.cfg.Session/5)
	if !now.Before(until) {
		return time.Time{}, false
	}
	if r.rankFirst() != r.cfg.ID {
		return time.Time{}, false
	}
	return until, true
}

// rankFirst is the live replica (the lost leader not: its presence may
// outlive its last decisions) that ranks first by the hash of its ID, ""
// when none is. Live is judged from the presence records alone, every
// replica's included (this one's too): a replica whose newest record is
// at most Silence older than the newest record read. Not against the
// clock: every replica reads the same records in the same order, so they
// name the same one even while their reads stall, as they all do on a
// Kafka lease topic of one partition while a transaction the lost leader
// left open holds every later record from them (up to about the session
// timeout):
// against the clock each then found every other replica silent and took
// itself for first. Called with r.mu held.
func (r *Replicator) rankFirst() string {
	var newest time.Time
	for _, at := range r.present {
		if at.After(newest) {
			newest = at
		}
	}
	best, bestH := "", uint64(0)
	for id, at := range r.present {
		if newest.Sub(at) > r.cfg.Silence || id == r.leaderID {
			continue
		}
		if h := rank(id); best == "" || h > bestH || h == bestH && id < best {
			best, bestH = id, h
		}
	}
	return best
}

// rank is a replica's rendezvous rank.
func rank(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("client-quotas/" + id))
	x := h.Sum64()
	// A finalizer (splitmix64's): FNV's high bits barely move for IDs
	// that differ in their last byte.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
