package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/internal/shard"
)

// sharding is the daemon's shard assignment (ha.shards): one assigner per
// watched cluster, and the exchange that carries each shard's decisions to
// the other replicas. The zero value shards nothing.
type sharding struct {
	id        string
	byCluster map[string]shard.Assigner
	order     []string
	x         *shard.Exchange
	stop      context.CancelFunc
	wg        sync.WaitGroup
}

// add runs the cluster's observation on the shards a assigns this replica
// and those it stands in for (shard.Exchange.Observers): the observer is
// narrowed to the names of those shards.
func (s *sharding) add(a shard.Assigner, o interface{ SetOwns(func(string) bool) }) {
	if s.byCluster == nil {
		s.byCluster = map[string]shard.Assigner{}
	}
	s.byCluster[a.Cluster()] = a
	s.order = append(s.order, a.Cluster())
	o.SetOwns(func(name string) bool {
		owned, _ := a.Owned(time.Now())
		n := shard.Of(name, a.Count())
		return slices.Contains(owned, n) || s.x != nil && s.x.StandsIn(a.Cluster(), n)
	})
}

// exchange carries the decisions of every cluster's shards through x;
// call it after every add.
func (s *sharding) exchange(x *shard.Exchange) {
	s.x = x
	for _, c := range s.order {
		x.Add(s.byCluster[c])
	}
}

// sharded reports whether cluster's observation is split across replicas.
func (s *sharding) sharded(cluster string) bool {
	_, ok := s.byCluster[cluster]
	return ok
}

// start runs the assigners and the exchange until release.
func (s *sharding) start(ctx context.Context) {
	if len(s.order) == 0 {
		return
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	for _, c := range s.order {
		s.wg.Go(func() { _ = s.byCluster[c].Run(rctx) })
	}
	if s.x != nil {
		s.x.Start(ctx)
	}
}

// release hands this replica's shards over (within ctx) and stops the
// assigners and the exchange. Idempotent; a no-op if they never started.
func (s *sharding) release(ctx context.Context) {
	if s.stop == nil {
		return
	}
	for _, c := range s.order {
		s.byCluster[c].Release(ctx)
	}
	s.stop()
	s.wg.Wait()
	if s.x != nil {
		s.x.Close()
	}
	s.stop = nil
}

// offer passes a cluster's cycle to the exchange.
func (s *sharding) offer(cluster string, now time.Time) {
	if s.x != nil && s.sharded(cluster) {
		s.x.Offer(cluster, now)
	}
}

// ready says which shards this replica observes ("observes shards 0, 2 of
// 4 of a") and whether every assignment (but those of the clusters in
// skip, never observed, and with late all of them: the replica was ready
// once) and the exchange answered.
func (s *sharding) ready(skip map[string]bool, late bool) (string, bool) {
	now := time.Now()
	var parts []string
	ok := true
	for _, c := range s.order {
		a := s.byCluster[c]
		owned, synced := a.Owned(now)
		switch {
		case !synced:
			ok = ok && (skip[c] || late)
			parts = append(parts, fmt.Sprintf("shards of %s not yet assigned", c))
		case len(owned) == 0:
			parts = append(parts, fmt.Sprintf("observes no shard of %d of %s", a.Count(), c))
		default:
			parts = append(parts, fmt.Sprintf("observes shards %s of %d of %s", list(owned), a.Count(), c))
		}
		if s.x != nil {
			var stand []int
			for i := range a.Count() {
				if s.x.StandsIn(c, i) {
					stand = append(stand, i)
				}
			}
			if len(stand) > 0 {
				parts[len(parts)-1] += fmt.Sprintf(" (standing in for the silent owner of %s)", list(stand))
			}
		}
	}
	if s.x != nil && len(s.order) > 0 && !s.x.Synced() {
		ok = false
		parts = append(parts, "shard decisions not yet synced")
	}
	return strings.Join(parts, "; "), ok
}

// list is "1, 3".
func list(shards []int) string {
	ns := make([]string, len(shards))
	for i, o := range shards {
		ns[i] = fmt.Sprint(o)
	}
	return strings.Join(ns, ", ")
}

// views lists every shard of every cluster with the replica that observes
// it (the assigned owner, or the one standing in for it), for /v1/lag.
func (s *sharding) views() []daemon.ShardView {
	var out []daemon.ShardView
	now := time.Now()
	for _, c := range s.order {
		assigned := s.byCluster[c].Owners()
		owners, stand := assigned, []bool(nil)
		if s.x != nil {
			owners, stand = s.x.Observers(c, now)
		}
		for i, owner := range owners {
			v := daemon.ShardView{Cluster: c, Shard: i, Owner: owner, Self: owner == s.id}
			if i < len(stand) && stand[i] {
				v.StandIn = true
				if i < len(assigned) {
					v.Assigned = assigned[i]
				}
			}
			if s.x != nil {
				if r, ok := s.x.Remote(c, i); ok {
					v.DecisionsAt, v.Decisions = r.At, len(r.Decisions)
				}
			}
			out = append(out, v)
		}
	}
	return out
}
