package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/lagbridge/lagbridge/internal/leader"
	"github.com/lagbridge/lagbridge/internal/publish"
)

// gated publishes only while this replica leads the publisher's cluster.
// Used by the engine's publishing goroutine only.
type gated struct {
	publish.Publisher
	e leader.Elector
	// standIn, when set (the Kafka client quotas of the lease state's
	// cluster), says whether this follower writes for a silent leader
	// meanwhile, and until when (replica.Replicator.ClientQuotaStandIn).
	standIn func(now time.Time) (time.Time, bool)
	log     *slog.Logger
	mode    gateMode // at the last publish
}

// gateMode is what a gated publisher did at a publish.
type gateMode int

const (
	gateIdle    gateMode = iota // following: nothing
	gateLeader                  // leading
	gateStandIn                 // standing in for a silent leader
)

// Publish implements publish.Publisher: nothing while following, unless
// it stands in (gated.standIn). On starting to write, a publisher that
// remembers what it wrote (publish.KVPublisher, ClientQuotaPublisher)
// forgets it: another replica wrote meanwhile. The publish runs under
// leader.Fence (no write starts after the lease ran out, and the NATS KV
// writes are fenced by the broker), or a stand-in's under its deadline.
func (g *gated) Publish(ctx context.Context, s publish.Snapshot) error {
	now := time.Now()
	ctx, cancel, ok := leader.Fence(ctx, g.e, now)
	defer cancel()
	mode := gateIdle
	if ok {
		mode = gateLeader
	} else if g.standIn != nil {
		if until, in := g.standIn(now); in {
			var cancelIn context.CancelFunc
			ctx, cancelIn = context.WithDeadline(ctx, until)
			defer cancelIn()
			mode = gateStandIn
		}
	}
	if mode != g.mode {
		if mode != gateIdle {
			if r, can := g.Publisher.(interface{ Reset() }); can {
				r.Reset()
			}
		}
		if (mode == gateStandIn || g.mode == gateStandIn) && g.log != nil {
			g.log.Info("standing in for a silent leader: writing its "+g.Name(), "on", mode == gateStandIn)
		}
	}
	if g.mode = mode; mode == gateIdle {
		return nil
	}
	return g.Publisher.Publish(ctx, s)
}

// elections are the daemon's electors, one per watched cluster.
type elections struct {
	byCluster map[string]leader.Elector
	order     []string
	stop      context.CancelFunc
	done      chan struct{}
}

// leading reports whether this replica publishes for cluster now.
func (el *elections) leading(cluster string) bool {
	e, ok := el.byCluster[cluster]
	if !ok {
		return true
	}
	_, lead := e.Leading(time.Now())
	return lead
}

// gate wraps p so it publishes only while leading cluster.
func (el *elections) gate(cluster string, p publish.Publisher) publish.Publisher {
	e, ok := el.byCluster[cluster]
	if !ok {
		return p
	}
	return &gated{Publisher: p, e: e}
}

// gatedBy reports whether any of ps (gate's) is gated by e.
func gatedBy(ps []publish.Publisher, e leader.Elector) bool {
	for _, p := range ps {
		if g, ok := p.(*gated); ok && g.e == e {
			return true
		}
	}
	return false
}

// standIn lets the gated publishers ps (gate's) of the cluster whose
// elector is e publish also while standIn says so.
func standIn(ps []publish.Publisher, e leader.Elector, in func(time.Time) (time.Time, bool), log *slog.Logger) {
	for _, p := range ps {
		if g, ok := p.(*gated); ok && g.e == e {
			g.standIn, g.log = in, log
		}
	}
}

func (el *elections) add(e leader.Elector) {
	if el.byCluster == nil {
		el.byCluster = map[string]leader.Elector{}
	}
	el.byCluster[e.Cluster()] = e
	el.order = append(el.order, e.Cluster())
}

// start runs every election until release.
func (el *elections) start(log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	el.stop, el.done = cancel, make(chan struct{})
	running := make(chan struct{}, len(el.order))
	for _, c := range el.order {
		go func() {
			defer func() { running <- struct{}{} }()
			if err := el.byCluster[c].Run(ctx); err != nil {
				log.Error("leader election stopped", "cluster", c, "err", err)
			}
		}()
	}
	go func() {
		for range el.order {
			<-running
		}
		close(el.done)
	}()
}

// release hands leadership over (within ctx) and stops the elections.
// Idempotent; a no-op if they never started.
func (el *elections) release(ctx context.Context) {
	if el.stop == nil {
		return
	}
	for _, c := range el.order {
		el.byCluster[c].Release(ctx)
	}
	el.stop()
	<-el.done
	el.stop = nil
}

// ready reports whether every election waited for has answered, and the
// replica's role per cluster, with the epoch it leads in ("leader of a
// (epoch 7); follower of b"), so that an operator comparing replicas sees
// which leadership is the newest without reading /metrics. The elections
// of the clusters in skip, and with late every election, are not waited
// for: one not answered yet reads "election not answered yet of c".
func (el *elections) ready(skip map[string]bool, late bool) (string, bool) {
	now := time.Now()
	roles := map[leader.Role][]string{}
	var notWaited []string
	for _, c := range el.order {
		e := el.byCluster[c]
		r, name := e.Role(now), c
		if epoch, ok := e.Leading(now); ok && r == leader.RoleLeader {
			name = fmt.Sprintf("%s (epoch %d)", c, epoch)
		}
		if r == leader.RoleUnknown && (skip[c] || late) {
			notWaited = append(notWaited, c)
			continue
		}
		roles[r] = append(roles[r], name)
	}
	var parts []string
	for _, r := range []leader.Role{leader.RoleLeader, leader.RoleFollower, leader.RoleUnknown} {
		if cs := roles[r]; len(cs) > 0 {
			slices.Sort(cs)
			name := r.String()
			if r == leader.RoleUnknown {
				name = "not yet synced"
			}
			parts = append(parts, fmt.Sprintf("%s of %s", name, strings.Join(cs, ", ")))
		}
	}
	if len(notWaited) > 0 {
		slices.Sort(notWaited)
		parts = append(parts, "election not answered yet of "+strings.Join(notWaited, ", "))
	}
	return strings.Join(parts, "; "), len(roles[leader.RoleUnknown]) == 0
}
