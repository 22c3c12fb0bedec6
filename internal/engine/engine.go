// Package engine turns the observation loops' lag states into leases: it
// steps the quota controller per target, combines the decisions of every
// consumer group of a topic, allocates each topic's rate across the
// producers that reported demand, and publishes the resulting lease sets to
// the quota protocol's hub (push), a NATS KV bucket and Kafka client quotas.
//
// The pure parts live in quota/; this package owns the state, the lock and
// the publishing goroutines (one per publisher).
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/lagbridge/lagbridge/internal/publish"
	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/producerclient/quotaproto"
	"github.com/lagbridge/lagbridge/quota"
)

// Config builds an Engine.
type Config struct {
	Policies   []quota.Policy
	Controller quota.ControllerConfig
	Lease      quota.LeaseConfig
	// Hub receives every producer's set as it changes; a
	// *quotaserver.Hub, or, on a replica that serves another's sets
	// while it follows, what stands in front of one.
	Hub        Hub
	Publishers []publish.Publisher
	Logger     *slog.Logger
	// Now is the engine's clock: the time of HTTP reports and the base
	// of lease set versions (Lease.VersionBase unset). Nil means time.Now.
	Now func() time.Time
	// Log, when set, is shown every topic's decision and every lease after
	// each cycle (the decision log); it runs under the engine's lock.
	Log DecisionLog
	// MaxProducers bounds the producer ids the engine keeps: those that
	// reported within the lease lifetime (each observation cycle evicts
	// the older ones). A report from a new id beyond it is refused with
	// a [*BusyError] (errors.Is [ErrTooManyProducers]); the ids already
	// known keep reporting. Zero means [DefaultMaxProducers]; negative
	// is invalid.
	MaxProducers int
}

// Hub is where the engine publishes lease sets (*quotaserver.Hub). Its
// methods are called with the engine's lock held and must not call back.
type Hub interface {
	// Publish stores the producer's current set.
	Publish(set quotaproto.LeaseSet) bool
	// Remove forgets a producer that stopped reporting.
	Remove(producer string)
}

// DecisionLog records decisions after each cycle (internal/history.Log).
type DecisionLog interface {
	Observe(now time.Time, topics map[quota.Topic]quota.TopicDecision, leases []quota.Lease, budget func(policy string) time.Duration)
}

// DefaultMaxProducers is Config.MaxProducers's default. Each producer costs
// about 1.7 KB of heap per topic it reports (measured by
// BenchmarkNewIDFlood).
const DefaultMaxProducers = 20000

// ErrTooManyProducers is wrapped by the [*BusyError] Report returns for a
// new producer id while the engine keeps MaxProducers of them.
var ErrTooManyProducers = errors.New("engine: too many producers")

// BusyError refuses a report for now: retrying after Wait may succeed, once
// the observation cycles evicted producers that stopped reporting. The HTTP
// layer answers it with 503 and a Retry-After header.
type BusyError struct {
	// Max is the number of producers the engine keeps.
	Max int
	// Wait is the retry-after hint: one observation interval.
	Wait time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("the daemon keeps leases for at most %d producers and has no room for a new one; retry in %v", e.Max, e.Wait)
}

// Unwrap returns [ErrTooManyProducers].
func (e *BusyError) Unwrap() error { return ErrTooManyProducers }

// RetryAfter returns Wait.
func (e *BusyError) RetryAfter() time.Duration { return e.Wait }

// Engine is safe for concurrent use: observation loops call OnCycle, the
// HTTP server calls Report and Quotas.
type Engine struct {
	mu       sync.Mutex
	policies *quota.Policies
	ctl      *quota.Controller
	book     *quota.LeaseBook
	hub      Hub
	log      *slog.Logger
	now      func() time.Time
	pubs     []publish.Publisher
	declog   DecisionLog

	// decisions holds the newest decision per target, by cluster.
	decisions map[string]map[lag.Target]quota.Decision
	// remote holds, by source, the decisions other replicas made for
	// the targets they observe (SetRemote).
	remote map[string][]quota.Decision
	// adopted is, per target, the At of the remote decision its
	// controller last adopted (adoptRemote).
	adopted map[lag.Target]time.Time
	// topics holds the combined decision per topic.
	topics map[quota.Topic]quota.TopicDecision
	// published is the fingerprint and version of each producer's set.
	published map[string]published
	version   uint64
	// lifetime is the lease lifetime (quota.LeaseConfig's, defaults applied).
	lifetime time.Duration
	interval time.Duration
	// producers holds every producer that reported within lifetime.
	producers    map[string]*producer
	maxProducers int
	// busy counts the reports refused for want of room.
	busy uint64
	// byName indexes topics by name (a producer reports names only; one
	// name may exist on several clusters), sorted.
	byName map[string][]quota.Topic

	// kicks wake the publishing goroutines, one per publisher (capacity 1:
	// a publisher still publishing takes the newest snapshot next).
	kicks []chan struct{}
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// producer is what the engine knows of one reporting producer.
type producer struct {
	// names are the topic names of its last report, and reported that
	// report's demand and criticality per name (see joinNamed).
	names    []string
	reported []namedDemand
	// at is the time of its last report.
	at time.Time
	// topics are the topics it joined in the lease book.
	topics map[quota.Topic]struct{}
	// versions hashes the lease versions and names of its last
	// published set.
	versions uint64
}

// namedDemand is one topic of a producer's last report, as joined.
type namedDemand struct {
	name   string
	crit   quota.Criticality
	demand float64
}

type published struct {
	fingerprint string
	set         quotaproto.LeaseSet
	// above is when RenumberAbove last renumbered the set.
	above time.Time
}

// New validates cfg and returns an engine; Start runs its publishing
// goroutine. The error names every problem of cfg at once (errors.Join):
// the policies', the lease and controller configs' and MaxProducers.
func New(cfg Config) (*Engine, error) {
	var errs []error
	policies, err := quota.NewPolicies(cfg.Policies)
	errs = append(errs, err)
	if cfg.MaxProducers < 0 {
		errs = append(errs, fmt.Errorf("engine: MaxProducers must be >= 0 (0 means %d), got %d", DefaultMaxProducers, cfg.MaxProducers))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Lease.VersionBase == 0 {
		// Versions keep increasing across restarts: a producer never
		// takes a fresh daemon's lease for an old one.
		cfg.Lease.VersionBase = uint64(cfg.Now().UnixMicro())
	}
	book, err := quota.NewLeaseBook(cfg.Lease)
	errs = append(errs, err)
	if cfg.Controller.Interval == 0 {
		cfg.Controller.Interval = cfg.Lease.Interval
	}
	ctl, err := quota.NewController(cfg.Controller)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	lease := cfg.Lease.WithDefaults()
	return &Engine{lifetime: lease.Lifetime, interval: lease.Interval,
		policies: policies, ctl: ctl, book: book, hub: cfg.Hub, log: cfg.Logger, now: cfg.Now, pubs: cfg.Publishers, declog: cfg.Log,
		decisions: map[string]map[lag.Target]quota.Decision{}, remote: map[string][]quota.Decision{}, adopted: map[lag.Target]time.Time{}, topics: map[quota.Topic]quota.TopicDecision{},
		published: map[string]published{}, version: cfg.Lease.VersionBase,
		producers: map[string]*producer{}, maxProducers: cmp.Or(cfg.MaxProducers, DefaultMaxProducers),
		byName: map[string][]quota.Topic{},
		kicks:  kicks(len(cfg.Publishers)), stop: func() {},
	}, nil
}

// kicks returns n channels of capacity 1.
func kicks(n int) []chan struct{} {
	ks := make([]chan struct{}, n)
	for i := range ks {
		ks[i] = make(chan struct{}, 1)
	}
	return ks
}

// Start runs the publishing goroutines until Close: one per publisher,
// each publishing the newest snapshot when woken, so that one slow to
// answer never holds another's writes. A broker that took 4.7 s over an
// AlterClientQuotas (Kafka 4.3.1 on a loaded machine) held the lease
// replication's writes behind it, which in HA serve the SDK producers
// their sets (replica.Replicator.Publish): the producers kept a set 4.7 s
// old while the controller took the rates it had raised meanwhile for
// unused, and released the topic to unlimited.
func (e *Engine) Start(ctx context.Context) {
	if len(e.pubs) == 0 {
		return
	}
	ctx, e.stop = context.WithCancel(ctx)
	for i, p := range e.pubs {
		e.wg.Go(func() { e.publishing(ctx, p, e.kicks[i]) })
	}
}

// publishing runs p on every kick until ctx ends, each call within 10 s;
// a failure is warned about once per outage and its recovery logged.
func (e *Engine) publishing(ctx context.Context, p publish.Publisher, kick <-chan struct{}) {
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := p.Publish(pctx, e.snapshot())
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return // stopping: neither a failure nor a recovery
		case err != nil:
			if !failing {
				e.log.Warn("publishing quotas failed", "publisher", p.Name(), "err", err)
			}
			failing = true
		case failing:
			e.log.Info("publishing quotas recovered", "publisher", p.Name())
			failing = false
		}
	}
}

// Close stops the publishing goroutines and waits for them. Idempotent.
func (e *Engine) Close() {
	e.stop()
	e.wg.Wait()
}

// snapshot returns a copy of the current state for the publishers.
func (e *Engine) snapshot() publish.Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	sets := make([]quotaproto.LeaseSet, 0, len(e.published))
	for _, p := range e.published {
		sets = append(sets, p.set)
	}
	sort.Slice(sets, func(i, j int) bool { return sets[i].Producer < sets[j].Producer })
	return publish.Snapshot{Sets: sets, Leases: e.book.Leases(), Topics: maps.Clone(e.topics), Policies: e.policies}
}

// Rules returns the lag status rules for a target: a matching policy's
// maxAge is its lag age. Safe to call from the loops.
func (e *Engine) Rules(base lag.Rules) func(lag.Target) lag.Rules {
	return func(t lag.Target) lag.Rules {
		r := base
		if p, ok := e.policies.Match(t); ok {
			r.LagAge = p.MaxAge
		}
		return r
	}
}

// Urgent is the head age past which a consumer's own report about t wakes
// its observation loop for an early cycle (daemon.Loop.Urgent): the
// controller's engage threshold for t's policy at the engine's interval
// (quota.Controller.EngageWait; 0.4 s for a 2 s maxAge at 1 s). Zero for
// a target no policy matches: its reports wake nothing. Safe for
// concurrent use (it reads only the policies and the controller's
// configuration, neither of which changes).
func (e *Engine) Urgent(t lag.Target) time.Duration {
	p, ok := e.policies.Match(t)
	if !ok {
		return 0
	}
	return e.ctl.EngageWait(&p, e.interval)
}

// OnCycle folds one cluster's states into decisions and leases. It is the
// daemon.Loop's OnCycle hook.
func (e *Engine) OnCycle(cluster string, now time.Time, states []lag.State) {
	e.mu.Lock()
	defer e.mu.Unlock()
	prev := e.decisions[cluster]
	next := make(map[lag.Target]quota.Decision, len(states))
	var begun, unrated []lag.Target
	for _, st := range states {
		if d, had := prev[st.Target]; !had {
			begun = append(begun, st.Target)
		} else if d.Rule == quota.RuleRatesUnknown {
			unrated = append(unrated, st.Target)
		}
	}
	// A target still without rates adopts before its step: the remote
	// decision may have come after the cycle that began it (a replica that
	// restarts observes before it has read the lease state).
	e.adoptRemote(unrated)
	for _, st := range states {
		p, ok := e.policies.Match(st.Target)
		if !ok {
			continue
		}
		next[st.Target] = e.ctl.Step(st, p, now)
	}
	e.adoptRemote(begun)
	for t := range prev {
		if _, ok := next[t]; !ok {
			e.ctl.Forget(t)
			delete(e.adopted, t)
		}
	}
	e.decisions[cluster] = next
	before := slices.Collect(maps.Keys(e.topics))
	e.recombine()
	e.leaveGone(before)
	e.joinNamed(before)
	for _, d := range e.topics {
		if p, ok := e.policies.ByName(d.Policy); ok {
			e.book.Apply(d, p, now)
		}
	}
	e.book.Expire(now)
	if e.declog != nil {
		e.declog.Observe(now, e.topics, e.book.Leases(), e.budget)
	}
	e.publishAll(now)
}

// leaveGone drops the leases of the topics in before that no target
// decides anymore (a deleted topic, its last group gone), so that their
// producers get the open lease of an unobserved topic at this cycle
// rather than keeping the last cut until it expires. Called with e.mu
// held.
func (e *Engine) leaveGone(before []quota.Topic) {
	var gone map[quota.Topic]bool
	for _, t := range before {
		if _, ok := e.topics[t]; !ok {
			if gone == nil {
				gone = map[quota.Topic]bool{}
			}
			gone[t] = true
		}
	}
	if gone == nil {
		return
	}
	for _, l := range e.book.Leases() {
		if gone[l.Topic] {
			e.book.Leave(l.Producer, l.Topic)
		}
	}
}

// joinNamed joins producers to the topics that became known at this cycle
// (not in before) under a name their last report gave, with that report's
// demand and time, as if they had reported now. A producer that named a
// topic before the daemon observed it holds the open lease of an unknown
// name; without this, the first decision that limits the topic would
// reach it only at its next report, up to a refresh interval (a third of
// the lease lifetime) later, while it produces without limit. Called with
// e.mu held, before the cycle allocates and publishes.
func (e *Engine) joinNamed(before []quota.Topic) {
	known := make(map[quota.Topic]bool, len(before))
	for _, t := range before {
		known[t] = true
	}
	fresh := map[string]bool{}
	for t := range e.topics {
		if !known[t] {
			fresh[t.Name] = true
		}
	}
	if len(fresh) == 0 {
		return
	}
	for id, pr := range e.producers {
		for _, nd := range pr.reported {
			if !fresh[nd.name] {
				continue
			}
			for _, t := range e.topicsNamed(nd.name) {
				if _, in := pr.topics[t]; in || known[t] {
					continue
				}
				if _, ok := e.policies.ByName(e.topics[t].Policy); !ok {
					continue
				}
				r := quota.Report{Producer: id, Topic: t, Criticality: nd.crit, Demand: nd.demand}
				if e.book.Report(r, pr.at) == nil {
					pr.topics[t] = struct{}{}
				}
			}
		}
	}
}

// budget returns a policy's budget (maxAge - processingTime); 0 for an
// unknown policy.
func (e *Engine) budget(policy string) time.Duration {
	if p, ok := e.policies.ByName(policy); ok {
		return p.Budget()
	}
	return 0
}

// SetRemote replaces the decisions of one source: the decisions another
// replica made for the targets of a shard (internal/shard). They take part
// in the per-topic decisions, and so in the leases, from the next OnCycle
// on, for every target this engine does not decide itself, and for those
// whose own decision is still quota.RuleRatesUnknown (a shard that moved
// here: the former owner's decision holds until the rates are known); the
// newest of several for one target counts. They are not stepped, listed
// by Decisions, nor forgotten when a cycle leaves them out. nil or empty
// ds removes the source. Safe for concurrent use.
func (e *Engine) SetRemote(source string, ds []quota.Decision) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(ds) == 0 {
		delete(e.remote, source)
		return
	}
	e.remote[source] = slices.Clone(ds)
}

// Follow makes the leader's decisions ds the rates in force of this
// engine's controller (quota.Controller.Adopt), for the targets this
// engine decides itself: a follower steps every target it observes, but
// producers obey the leader's leases, so its own regime would diverge
// (released while the leader still probes a limited rate, say), and on
// taking over it would serve that. Fed the leader's newest decisions each
// time they arrive, it continues from the leader's state instead. Targets
// this engine does not decide are ignored; the leases change only at the
// next OnCycle. Safe for concurrent use.
func (e *Engine) Follow(ds []quota.Decision) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range ds {
		if _, own := e.decisions[d.Target.Cluster][d.Target]; own {
			e.ctl.Adopt(d)
		}
	}
}

// StandIn says whether this engine's sets are served while standing in for
// a silent leader (quota.Controller.StandIn). Safe for concurrent use.
func (e *Engine) StandIn(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ctl.StandIn(on)
}

// adoptRemote makes, for each target this engine has just begun to decide
// (its shard moved here, or stood in for), or decides still without
// rates, the newest remote decision of it the rate in force of the
// controller (quota.Controller.Adopt), once per remote decision, as
// Follow does for a follower: the new observer goes on from the former
// one's regime. Without it a fresh controller is unlimited until its own
// measurements engage it, and a consumer whose capacity it cannot measure
// yet (no commit seen) reads as a wait of 0: its first decision with
// rates would open a topic the former owner limited. Called with e.mu
// held.
func (e *Engine) adoptRemote(begun []lag.Target) {
	if len(begun) == 0 || len(e.remote) == 0 {
		return
	}
	remote := e.remoteByTarget()
	for _, t := range begun {
		if r, ok := remote[t]; ok && !r.At.Equal(e.adopted[t]) {
			e.ctl.Adopt(r)
			e.adopted[t] = r.At
		}
	}
}

// remoteByTarget returns the newest remote decision of each target.
// Called with e.mu held.
func (e *Engine) remoteByTarget() map[lag.Target]quota.Decision {
	var remote map[lag.Target]quota.Decision
	for _, ds := range e.remote {
		for _, d := range ds {
			if remote == nil {
				remote = map[lag.Target]quota.Decision{}
			}
			if r, ok := remote[d.Target]; !ok || d.At.After(r.At) {
				remote[d.Target] = d
			}
		}
	}
	return remote
}

// recombine rebuilds the per-topic decisions from every cluster's targets
// and the remote ones: a producer's quota on a topic is the strictest of
// its consumer groups.
func (e *Engine) recombine() {
	byTopic := map[quota.Topic][]quota.Decision{}
	remote := e.remoteByTarget()
	for _, ds := range e.decisions {
		for t, d := range ds {
			// A target this engine has just begun to decide (its
			// shard moved here) keeps the former owner's decision
			// until its own rates are known.
			if r, ok := remote[t]; ok && d.Rule == quota.RuleRatesUnknown {
				d = r
			}
			byTopic[quota.TopicOf(t)] = append(byTopic[quota.TopicOf(t)], d)
		}
	}
	for t, d := range remote {
		if _, own := e.decisions[t.Cluster][t]; !own {
			byTopic[quota.TopicOf(t)] = append(byTopic[quota.TopicOf(t)], d)
		}
	}
	clear(e.topics)
	clear(e.byName)
	for t, ds := range byTopic {
		sort.Slice(ds, func(i, j int) bool { return ds[i].Target.String() < ds[j].Target.String() })
		e.topics[t] = quota.CombineTopic(ds)
		e.byName[t.Name] = append(e.byName[t.Name], t)
	}
	for _, ts := range e.byName {
		sort.Slice(ts, func(i, j int) bool { return ts[i].String() < ts[j].String() })
	}
}

// topicsNamed returns the known topics with a name (a producer reports names
// only; one name may exist on several clusters), sorted. Do not modify.
func (e *Engine) topicsNamed(name string) []quota.Topic { return e.byName[name] }

// Report records a producer's demand and returns its lease set at once.
//
// Its cost does not grow with the number of producers: it joins the
// producer to the topics it names (see quota.LeaseBook.Join: a topic of at
// most quota.DefaultInlineMembers producers is re-allocated at once, a
// larger one at the next observation cycle) and republishes its own set and
// those of the producers whose leases the report changed. A new producer id
// while the engine keeps MaxProducers of them gets a [*BusyError]; a topic
// with a bad criticality, an error wrapping quota.ErrUnknownName; a negative
// or NaN demand, one wrapping quota.ErrInvalidReport (and no topic of the
// report is recorded, nor a new producer).
func (e *Engine) Report(r quotaproto.Report) (quotaproto.LeaseSet, error) {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	pr := e.producers[r.Producer]
	if pr == nil && len(e.producers) >= e.maxProducers {
		e.busy++
		return quotaproto.LeaseSet{}, &BusyError{Max: e.maxProducers, Wait: max(e.interval, time.Second)}
	}
	crits := make([]quota.Criticality, len(r.Topics))
	var errs []error
	for i, td := range r.Topics {
		if td.Demand < 0 || math.IsNaN(td.Demand) {
			errs = append(errs, fmt.Errorf("%w: topic %q: demand must be >= 0 msg/s, got %v", quota.ErrInvalidReport, td.Topic, td.Demand))
		}
		crits[i] = quota.Critical
		if td.Criticality != "" {
			c, err := quota.ParseCriticality(td.Criticality)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			crits[i] = c
		}
	}
	if len(errs) > 0 {
		return quotaproto.LeaseSet{}, errors.Join(errs...)
	}
	if pr == nil {
		pr = &producer{topics: map[quota.Topic]struct{}{}}
		e.producers[r.Producer] = pr
	}
	changed := map[string]bool{}
	for i, td := range r.Topics {
		demand := e.demandOf(td)
		for _, t := range e.topicsNamed(td.Topic) {
			d := e.topics[t]
			p, ok := e.policies.ByName(d.Policy)
			if !ok {
				continue
			}
			_, others, err := e.book.Join(quota.Report{Producer: r.Producer, Topic: t, Criticality: crits[i], Demand: demand}, d, p, now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			pr.topics[t] = struct{}{}
			for _, l := range others {
				changed[l.Producer] = true
			}
		}
	}
	pr.names, pr.reported = pr.names[:0], pr.reported[:0]
	for i, td := range r.Topics {
		pr.names = append(pr.names, td.Topic)
		pr.reported = append(pr.reported, namedDemand{name: td.Topic, crit: crits[i], demand: e.demandOf(td)})
	}
	pr.at = now
	if len(errs) > 0 {
		return quotaproto.LeaseSet{}, errors.Join(errs...)
	}
	moved := e.publishOne(r.Producer, now, false)
	for id := range changed {
		if id != r.Producer && e.publishOne(id, now, false) {
			moved = true
		}
	}
	if moved {
		e.kickPublishers()
	}
	return e.published[r.Producer].set, nil
}

// demandOf is the demand a report's topic claims, msg/s: a 0 is unknown
// ([quota.UnknownDemand], its class's whole share under strict priority)
// unless the producer says it measured it (protocol 1.7): a producer idle
// on the topic then claims one message per refresh (the lease lifetime's
// third: 0.3 msg/s at the default 10 s), its lease a burst of 1, so that
// its first message after idle passes even while the classes below ask
// for the whole rate, and the report the SDK sends at that message brings
// its class's share. The trickle comes out of the lower classes (strict
// priority), not on top of the rate: n idle producers of a class take
// n x 3/lifetime msg/s from the classes below it, or share the rate among
// themselves when it is smaller. Beyond it, an idle producer receives what
// nobody asked for ([quota.PriorityFair]'s headroom).
func (e *Engine) demandOf(td quotaproto.TopicDemand) float64 {
	switch {
	case td.Demand == 0 && !td.Measured:
		return quota.UnknownDemand
	case td.Demand == 0:
		return 3 / e.lifetime.Seconds()
	}
	return td.Demand
}

// publishOne rebuilds one producer's set from the book and publishes it;
// it reports whether its version moved. With onlyChanged, a set whose
// leases kept their versions is left as it is, expiries included (the
// producer's own reports refresh them). Called with e.mu held.
func (e *Engine) publishOne(id string, now time.Time, onlyChanged bool) bool {
	pr := e.producers[id]
	if pr == nil {
		return false
	}
	ls := make([]quota.Lease, 0, len(pr.topics))
	for t := range pr.topics {
		if l, ok := e.book.Lease(id, t); ok {
			ls = append(ls, l)
		} else {
			delete(pr.topics, t)
		}
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].Topic.String() < ls[j].Topic.String() })
	sum := publish.Versions(ls, pr.names)
	if _, had := e.published[id]; onlyChanged && had && sum == pr.versions {
		return false
	}
	pr.versions = sum
	return e.publishSet(id, ls, now)
}

// publishSet builds producer's set from its leases ls (sorted by topic) and
// publishes it to the hub: with a new version when its content changed
// (reported true: watchers are woken), else with the same version and the
// new expiries. Called with e.mu held.
func (e *Engine) publishSet(producer string, ls []quota.Lease, now time.Time) bool {
	set := e.buildSet(producer, ls, now)
	fp := publish.Fingerprint(set)
	old, had := e.published[producer]
	if had && old.fingerprint == fp {
		set.Version = old.set.Version
		e.published[producer] = published{fingerprint: fp, set: set}
		e.hub.Publish(set)
		return false
	}
	// A new version is at least now in Unix microseconds: replicas of
	// the daemon, whose clocks agree, number their sets on one scale, so
	// a producer failing over to another replica never sees a version
	// below the one it holds (and its set is not ignored as older).
	e.version = max(e.version+1, uint64(max(now.UnixMicro(), 0)))
	set.Version = e.version
	e.published[producer] = published{fingerprint: fp, set: set}
	e.hub.Publish(set)
	return true
}

// Renumber gives every published set a new version above both floor and
// every version the engine issued, and publishes them again: a replica
// that starts leading numbers above the last version the previous leader
// wrote (floor), so a producer's version guard never sees its set go
// back. Safe for concurrent use.
func (e *Engine) Renumber(floor uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.version = max(e.version, floor)
	ids := make([]string, 0, len(e.published))
	for id := range e.published {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	now := uint64(max(e.now().UnixMicro(), 0))
	for _, id := range ids {
		p := e.published[id]
		e.version = max(e.version+1, now)
		p.set.Version = e.version
		e.published[id] = p
		e.hub.Publish(p.set)
	}
	e.kickPublishers()
}

// RenumberAbove gives producer's set a new version above held, and
// publishes it, when its version is below held (a set the producer holds
// at the same version is this one); it reports whether it did. A leader
// calls it for a producer that holds a set of another replica's numbered
// above the leader's (internal/replica: Held), which the producer's
// version guard would otherwise hold over the leader's until its leases
// expire. Safe for concurrent use.
func (e *Engine) RenumberAbove(producer string, held uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.published[producer]
	now := e.now()
	us := uint64(max(now.UnixMicro(), 0))
	// A follower numbers its sets from the versions it read or the wall
	// clock, one up per set: a held version far above both is no
	// replica's, and a producer (or its token) asks at most once an
	// interval: every renumbering is a write of the lease state.
	if !ok || p.set.Version >= held || held > max(e.version, us)+aboveLead || now.Sub(p.above) < e.interval {
		return false
	}
	e.version = max(e.version+1, held+1, us)
	p.set.Version = e.version
	p.above = now
	e.published[producer] = p
	e.hub.Publish(p.set)
	e.kickPublishers()
	return true
}

// aboveLead is how far above the engine's versions and the wall clock
// (microseconds) a held version RenumberAbove acts on may be.
const aboveLead = uint64(time.Second / time.Microsecond)

func (e *Engine) kickPublishers() {
	for _, k := range e.kicks {
		select {
		case k <- struct{}{}:
		default: // still publishing: it takes the newest snapshot next
		}
	}
}

// publishAll evicts the producers that stopped reporting and republishes
// the sets whose leases changed (see publishOne), pushing them. Called with
// e.mu held, once per observation cycle.
func (e *Engine) publishAll(now time.Time) {
	changed := false
	for id, pr := range e.producers {
		if now.Sub(pr.at) > e.lifetime {
			delete(e.producers, id)
			continue
		}
		if e.publishOne(id, now, true) {
			changed = true
		}
	}
	// Producers a kafkaClientQuota policy lists that never reported hold
	// leases too (their sets serve the other publishers).
	silent := map[string][]quota.Lease{}
	for _, l := range e.book.Silent() {
		if e.producers[l.Producer] == nil {
			silent[l.Producer] = append(silent[l.Producer], l)
		}
	}
	for id, ls := range silent {
		if e.publishSet(id, ls, now) {
			changed = true
		}
	}
	for id := range e.published {
		if _, ok := silent[id]; !ok && e.producers[id] == nil {
			delete(e.published, id)
			e.hub.Remove(id)
			changed = true
		}
	}
	if changed || len(e.pubs) > 0 {
		e.kickPublishers()
	}
}

// buildSet converts a producer's leases (sorted by topic) to the wire form
// (publish.Set): a lease without a reason of its own gets its topic's
// reason and rule; topic names it reported that have no lease get an open
// one. Called with e.mu held; it fills in reasons and rules in ls.
func (e *Engine) buildSet(producer string, ls []quota.Lease, now time.Time) quotaproto.LeaseSet {
	for i := range ls {
		if ls[i].Reason == "" {
			td := e.topics[ls[i].Topic]
			ls[i].Reason, ls[i].Rule = td.Reason, td.Rule
		}
	}
	var names []string
	if pr := e.producers[producer]; pr != nil {
		names = pr.names
	}
	return publish.Set(producer, ls, names, now, e.lifetime)
}

// Quotas is the operators' view served at /v1/quotas: every target's
// decision, sorted by target ("targets"), and the policies behind them
// ("policies", with maxAge, so the dashboard can draw each deadline).
// Safe for concurrent use.
func (e *Engine) Quotas() (targets []quota.Decision, policies []quota.Policy) {
	return e.Decisions(), e.policies.List()
}

// Decisions returns every target's decision, sorted by target.
func (e *Engine) Decisions() []quota.Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []quota.Decision{}
	for _, c := range slices.Sorted(maps.Keys(e.decisions)) {
		for _, d := range e.decisions[c] {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target.String() < out[j].Target.String() })
	return out
}

// ClusterDecisions returns a copy of the newest decision of every target
// of a cluster that a policy matches.
func (e *Engine) ClusterDecisions(cluster string) map[lag.Target]quota.Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.decisions[cluster])
}

// Engaged reports whether a policy is engaged on one of the targets of
// cluster as of its newest decisions: a target limited (a finite rate,
// or a signal other than ok) or its predicted wait above the policy's
// engage threshold (Urgent). Decisions that observing sooner cannot
// change do not count: a held one (the cluster's data is stale),
// fail-open, an abandoned target, an invalid policy, rates not known
// yet. The daemon.Loop's Engaged hook: while it holds, the cluster is
// observed at the engaged interval; the loop asks about the targets
// whose position moves that finely (lag.State.MovesWithin), or may (a
// Kafka target read from commits that moved at about every reading, read
// fast for a trial: daemon.Loop.Engaged).
func (e *Engine) Engaged(cluster string, targets []lag.Target) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ds := e.decisions[cluster]
	for _, t := range targets {
		d, ok := ds[t]
		if !ok {
			continue
		}
		switch d.Rule {
		case quota.RuleHold, quota.RuleFailOpen, quota.RuleAbandoned, quota.RuleInvalidPolicy, quota.RuleRatesUnknown:
			continue
		}
		if !d.IsUnlimited() || d.Signal != quota.SignalOK {
			return true
		}
		if p, ok := e.policies.Match(t); ok {
			if engage := e.ctl.EngageWait(&p, e.interval); engage > 0 && d.Wait > engage {
				return true
			}
		}
	}
	return false
}

// nearCapacity is the share of its capacity estimate at which an
// unlimited target's produce rate counts as running at its capacity
// (NearCapacity).
const nearCapacity = 0.9

// NearCapacity reports whether one of the targets of cluster is unlimited
// (RuleUnlimited, ok, fresh) while produced to nearCapacity or more of its
// capacity estimate, with a predicted wait under half the engage threshold
// at the fast interval. The estimate holds the highest rate the consumer
// was seen to consume (a measured capacity, or, never saturated, what it
// consumed: then every steadily consumed target is near it). The
// daemon.Loop's NearCapacity hook: such a target whose position moves
// finely is read every fast interval, so that a drop of its capacity is
// seen sooner. The wait keeps out a consumer whose standing queue the
// faster readings' engage threshold (0.2 s at 250 ms with a 2 s budget)
// would read as saturated: the switch alone would engage it. (A reporting
// consumer's poll in hand shows only after its first readings; the loop
// does not ask about those, see daemon.Loop.NearCapacity.)
func (e *Engine) NearCapacity(cluster string, targets []lag.Target, fast time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ds := e.decisions[cluster]
	for _, t := range targets {
		d, ok := ds[t]
		if !ok || d.Rule != quota.RuleUnlimited || d.Held || d.Signal != quota.SignalOK || d.Capacity <= 0 || d.ProduceRate < nearCapacity*d.Capacity || d.Wait < 0 {
			continue
		}
		if p, ok := e.policies.Match(t); ok && d.Wait < e.ctl.EngageWait(&p, fast)/2 {
			return true
		}
	}
	return false
}

// producerStats returns the number of producers kept and of reports
// refused for want of room.
func (e *Engine) producerStats() (known int, busy uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.producers), e.busy
}

// Leases returns every current lease (for metrics).
func (e *Engine) Leases() []quota.Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.book.Leases()
}
