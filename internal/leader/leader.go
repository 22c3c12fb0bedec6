// Package leader elects, per watched cluster, the one lagbridge replica that
// publishes: it writes the cluster's Kafka client quotas, the NATS KV lease
// bucket and the TTL enforcement. The election runs through the cluster
// itself, never through a store of lagbridge's own: on Kafka the replicas
// join a consumer group on a one-partition topic and the member assigned
// partition 0 leads, fenced by the group generation; on NATS the replicas
// race for one key of their deployment's KV bucket (Bucket), which
// expires after its writer's session timeout, renewed by a revision
// compare-and-set.
//
// A leader holds a local lease: it leads until the last confirmation from
// the broker plus the session timeout, minus a margin. A replica that was
// paused (SIGSTOP), partitioned or lost its session finds its lease expired
// on the clock before it can publish again, so it stops publishing within
// one interval of losing the broker's confirmation, whether or not the
// broker has told it yet.
package leader

import (
	"context"
	"sync"
	"time"
)

// Role is a replica's part in one cluster's election.
type Role int

const (
	// RoleUnknown: the election has not answered yet (not yet synced).
	RoleUnknown Role = iota
	// RoleFollower: another replica leads; this one publishes nothing.
	RoleFollower
	// RoleLeader: this replica publishes.
	RoleLeader
)

// String returns "unknown", "follower" or "leader".
func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RoleLeader:
		return "leader"
	}
	return "unknown"
}

// Elector is one cluster's election as a replica sees it. Safe for
// concurrent use.
type Elector interface {
	// Leading reports whether this replica may publish at now, and its
	// epoch (the Kafka group generation, or the NATS KV revision that
	// made it leader; it only grows across leaders). False once the
	// local lease expired, even before the broker said so.
	Leading(now time.Time) (epoch int64, ok bool)
	// Role is the replica's role at now.
	Role(now time.Time) Role
	// Run takes part in the election until ctx is done, then leaves
	// without releasing (a graceful stop calls Release first), or until
	// Release: it returns once its goroutines ended.
	Run(ctx context.Context) error
	// Release gives leadership up at once so another replica takes over
	// without waiting for the session timeout; call it while Run still
	// runs, on a graceful stop. Safe to call on a follower; idempotent.
	Release(ctx context.Context)
	// Cluster names the watched cluster.
	Cluster() string
}

// Single is the elector of a daemon without replicas (no ha: config): it
// always leads, epoch 0.
type Single struct{ Name string }

// Leading implements Elector: always true.
func (s Single) Leading(time.Time) (int64, bool) { return 0, true }

// Role implements Elector: always RoleLeader.
func (s Single) Role(time.Time) Role { return RoleLeader }

// Run implements Elector: it returns when ctx is done.
func (s Single) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// Release implements Elector: nothing to release.
func (s Single) Release(context.Context) {}

// Cluster implements Elector.
func (s Single) Cluster() string { return s.Name }

// lease is the local view of leadership shared by both electors: who
// leads, since which confirmation, until when. The zero value knows
// nothing yet (RoleUnknown).
type lease struct {
	mu     sync.Mutex
	known  bool
	held   bool
	epoch  int64
	until  time.Time
	onRole func(r Role, epoch int64, released bool) // called, outside mu, when the role changes (or the epoch, leading); may be nil
	// released: this replica gave leadership up (Release), so a turn to
	// follower is its own graceful stop, not another replica leading.
	released bool
	last     Role
	lastEp   int64 // the epoch last notified
}

// confirm records that the broker confirmed, at sent (when the request
// left, not when it returned), that this replica leads in epoch, for ttl.
func (l *lease) confirm(sent time.Time, epoch int64, ttl time.Duration) {
	l.hold(sent, epoch, ttl)
	l.notify(sent)
}

// hold is confirm without notifying (for a caller holding its own lock).
func (l *lease) hold(sent time.Time, epoch int64, ttl time.Duration) {
	l.mu.Lock()
	l.known, l.held, l.epoch, l.until = true, true, epoch, sent.Add(ttl)
	l.mu.Unlock()
}

// follow records that another replica leads (or that this one lost).
func (l *lease) follow(now time.Time) {
	l.mu.Lock()
	l.known, l.held = true, false
	l.mu.Unlock()
	l.notify(now)
}

func (l *lease) leading(now time.Time) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch, l.held && now.Before(l.until)
}

func (l *lease) role(now time.Time) Role {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.known:
		return RoleUnknown
	case l.held && now.Before(l.until):
		return RoleLeader
	}
	return RoleFollower
}

// notify calls onRole when the role at now differs from the last one
// notified, or when this replica still leads but in another epoch (a
// Kafka group generation moves at every rebalance, and a leader that
// keeps partition 0 through one leads on in the new generation).
func (l *lease) notify(now time.Time) {
	l.mu.Lock()
	r := RoleFollower
	switch {
	case !l.known:
		r = RoleUnknown
	case l.held && now.Before(l.until):
		r = RoleLeader
	}
	changed, epoch, f, released := r != l.last || (r == RoleLeader && l.epoch != l.lastEp), l.epoch, l.onRole, l.released
	l.last, l.lastEp = r, l.epoch
	l.mu.Unlock()
	if changed && f != nil {
		f(r, epoch, released)
	}
}
