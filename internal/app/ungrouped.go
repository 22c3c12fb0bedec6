package app

import (
	"log/slog"
	"sync"

	"github.com/lagbridge/lagbridge/internal/daemon"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// ungrouped warns, once per target, about a consumer group (NATS: a
// consumer) that reads a topic a quota policy defends but that the
// policy's match.group leaves out, while no group the policy matches on
// that topic binds: what a renamed group or a misspelt match.group looks
// like. The policy still applies to a target there (the group it names,
// abandoned, or gone), so the "applies to no target" warning stays
// silent, the producers get unlimited leases ("all groups abandoned"),
// and the consumer that really reads the topic is defended by nothing. A
// group left out on purpose beside a group the policy binds (analytics
// next to billing) is not named. It looks every recheckCycles cycles of
// any cluster. Safe for concurrent use: every loop's OnCycle calls it.
type ungrouped struct {
	mu     sync.Mutex
	pols   *quota.Policies
	topics *quota.Policies // the same policies with their group patterns dropped
	store  *daemon.Store
	log    *slog.Logger
	warned map[lag.Target]bool
	calls  int
}

func newUngrouped(pols *quota.Policies, specs []quota.Policy, store *daemon.Store, log *slog.Logger) *ungrouped {
	u := &ungrouped{pols: pols, store: store, log: log, warned: map[lag.Target]bool{}}
	grouped := make([]quota.Policy, 0, len(specs))
	for _, p := range specs {
		if p.Match.Group != "" {
			p.Match.Group = ""
			grouped = append(grouped, p)
		}
	}
	// Validated with the config: dropping a pattern keeps them valid.
	u.topics, _ = quota.NewPolicies(grouped)
	return u
}

// cycle runs after a cycle of any cluster.
func (u *ungrouped) cycle() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.topics.Len() == 0 {
		return
	}
	if u.calls++; u.calls%recheckCycles != 0 {
		return
	}
	type topic struct {
		kind          lag.Kind
		cluster, name string
		policy        string
	}
	states := u.store.States()
	binds := map[topic]bool{}
	for _, s := range states {
		if p, ok := u.pols.Match(s.Target); ok && s.Status != lag.StatusAbandoned {
			binds[topic{s.Target.Kind, s.Target.Cluster, s.Target.Topic, p.Name}] = true
		}
	}
	for _, s := range states {
		if s.Status == lag.StatusAbandoned || s.Status == lag.StatusStale || u.warned[s.Target] {
			continue
		}
		if _, ok := u.pols.Match(s.Target); ok {
			continue
		}
		p, ok := u.topics.Match(s.Target)
		if !ok || binds[topic{s.Target.Kind, s.Target.Cluster, s.Target.Topic, p.Name}] {
			continue
		}
		u.warned[s.Target] = true
		named, _ := u.pols.ByName(p.Name)
		u.log.Warn("a live consumer group reads a topic a quota policy defends, but the policy's match.group leaves it out and no group it matches there is live, so this group's lag limits no producer: a renamed group or a misspelt match.group? (lagbridge status lists the targets)",
			"policy", p.Name, "group_pattern", named.Match.Group, "cluster", s.Target.Cluster, "topic", s.Target.Topic, "group", s.Target.Group, "status", s.Status)
	}
}
