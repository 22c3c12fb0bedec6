package app

import (
	"log/slog"
	"sync"

	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/quota"
)

// unmatchedCycles is how many cycles of each cluster, every cluster
// observed, the daemon waits before it names the quota policies that match
// no target.
const unmatchedCycles = 3

// unmatched warns, once, about the quota policies that match none of the
// targets the daemon watches a few cycles after every cluster was
// observed: a policy whose topic is misspelt, or names a topic that does
// not exist or that no consumer group reads, otherwise does nothing and
// says nothing. It stays silent with shards (a replica watches only part
// of the topics). Safe for concurrent use: every loop's OnCycle calls it.
type unmatched struct {
	mu     sync.Mutex
	pols   *quota.Policies
	names  []string
	store  *daemon.Store
	log    *slog.Logger
	seen   map[string]bool
	cycles map[string]int // per cluster, since every cluster was observed
	done   bool
}

func newUnmatched(pols *quota.Policies, specs []quota.Policy, store *daemon.Store, log *slog.Logger) *unmatched {
	u := &unmatched{pols: pols, store: store, log: log, seen: map[string]bool{}, cycles: map[string]int{}, done: len(specs) == 0}
	for _, p := range specs {
		u.names = append(u.names, p.Name)
	}
	return u
}

// cycle runs after a cycle of cluster, one of clusters (every cluster the
// daemon observes): the warning waits for unmatchedCycles of each, so that
// a fast cluster's cycles do not speak for a slow one's targets.
func (u *unmatched) cycle(cluster string, clusters int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return
	}
	if ready, _ := u.store.Ready(); !ready {
		return
	}
	for _, s := range u.store.States() {
		if p, ok := u.pols.Match(s.Target); ok {
			u.seen[p.Name] = true
		}
	}
	u.cycles[cluster]++
	if len(u.cycles) < clusters {
		return
	}
	for _, n := range u.cycles {
		if n < unmatchedCycles {
			return
		}
	}
	u.done = true
	for _, n := range u.names {
		if !u.seen[n] {
			u.log.Warn("quota policy applies to no target: no (topic, consumer group) the daemon watches matches it, or an earlier policy takes each one it matches, so it limits no producer; check its match (anchored regexps) against the topics and groups on the brokers and the clusters' topics and groups filters (lagbridge status lists the targets)", "policy", n)
		}
	}
}
