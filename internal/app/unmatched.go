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

// recheckCycles is how often, in cycles of any cluster, the daemon looks
// again for a target of the policies it warned about, to say when one
// applies after all; matching every target against the policies costs a
// few milliseconds a cycle at 10,000 targets, so not every cycle.
const recheckCycles = 10

// unmatched warns, once, about the quota policies that match none of the
// targets the daemon watches a few cycles after every cluster was
// observed: a policy whose topic is misspelt, or names a topic that does
// not exist or that no consumer group reads, otherwise does nothing and
// says nothing. A policy warned about that later matches a target (its
// consumers started after the daemon, its topic was created) is named
// again, at info, with that target, so that the warning does not stand
// uncorrected in the log. It stays silent with shards (a replica watches
// only part of the topics). Safe for concurrent use: every loop's OnCycle
// calls it.
type unmatched struct {
	mu     sync.Mutex
	pols   *quota.Policies
	names  []string
	store  *daemon.Store
	log    *slog.Logger
	seen   map[string]bool
	cycles map[string]int // per cluster, since every cluster was observed
	warned map[string]bool
	calls  int // cycles since the warning
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
	if u.warned != nil {
		u.recheck()
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
	u.warned = map[string]bool{}
	for _, n := range u.names {
		if !u.seen[n] {
			u.warned[n] = true
			u.log.Warn("quota policy applies to no target: no (topic, consumer group) the daemon watches matches it, or an earlier policy takes each one it matches, so it limits no producer; check its match (anchored regexps) against the topics and groups on the brokers and the clusters' topics and groups filters (lagbridge status lists the targets)", "policy", n)
		}
	}
	u.done = len(u.warned) == 0
}

// recheck names, once each, the policies warned about that match a target
// now, and ends the watch once none is left.
func (u *unmatched) recheck() {
	if u.calls++; u.calls%recheckCycles != 0 {
		return
	}
	for _, s := range u.store.States() {
		if p, ok := u.pols.Match(s.Target); ok && u.warned[p.Name] {
			delete(u.warned, p.Name)
			u.log.Info("quota policy applies to a target now (it was named as applying to none)", "policy", p.Name,
				"cluster", s.Target.Cluster, "topic", s.Target.Topic, "group", s.Target.Group)
		}
	}
	u.done = len(u.warned) == 0
}
