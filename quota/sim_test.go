package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// This file holds a tiny deterministic queue simulator that closes the loop:
// producers offer a rate, capped by the lease they hold (a token bucket);
// partitions hold the admitted messages with their production times; a
// consumer with a capacity profile drains them; every observation interval a
// lag.Tracker folds a Sample, the Controller decides, the LeaseBook allocates
// and leases reach the producers after a push delay. Time is simulated in
// fixed ticks from a fixed origin: no wall clock, no goroutines, and the
// results are identical on every run.

var simT0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// simProducer is one producer of the simulation.
type simProducer struct {
	id   string
	crit Criticality
	// offer is the rate the producer would send at t seconds, msg/s.
	offer func(t float64) float64
	// from and to bound when the producer runs (seconds; to 0: forever).
	from, to float64
	// unknown: the producer reports no demand (UnknownDemand).
	unknown bool
	// honorAvoid: unkeyed traffic, so it writes around avoided partitions.
	honorAvoid bool

	lease    Lease
	hasLease bool
	pending  []pendingLease
	tokens   float64

	offered, admitted float64 // messages, whole run
	winOffered        float64 // messages inside simConfig.window
	winAdmitted       float64
}

type pendingLease struct {
	at time.Time
	l  Lease
}

func (p *simProducer) active(t float64) bool { return t >= p.from && (p.to == 0 || t < p.to) }

type chunk struct {
	n float64
	t time.Time
}

type simPartition struct {
	q            []chunk
	end          float64 // messages ever written
	consumed     float64
	consumedTick float64 // consumed in the current tick
}

func (p *simPartition) backlog() float64 { return p.end - p.consumed }

// simConfig describes one run.
type simConfig struct {
	interval   time.Duration // observation interval; default 1s
	tick       time.Duration // simulation step; default 10ms
	duration   time.Duration
	partitions int // default 1
	// capacity is the consumer's total capacity at t seconds, msg/s.
	capacity func(t float64) float64
	// partCap caps one partition's consumption (msg/s); nil or < 0: none.
	partCap func(p int, t float64) float64
	// members is the number of group members at t; nil: 1.
	members func(t float64) int
	// observeFails makes the observation at t fail (a sample with Err).
	observeFails func(t float64) bool
	// noise: the capacity varies by up to ±noise (relative), drawn once per
	// interval from a seeded source.
	noise     float64
	seed      uint64
	policy    Policy
	producers []*simProducer
	pushDelay time.Duration // default 100ms
	ctl       ControllerConfig
	// check is called with every allocation (total, demands, grants).
	check func(total float64, ds []Demand, gs []Grant)
	// window, in seconds, over which per-producer admitted/offered is
	// accumulated (for shares).
	window [2]float64
}

// simStep is what one observation interval looked like.
type simStep struct {
	t           float64 // seconds since start
	capacity    float64 // the consumer's true capacity now
	consumeInst float64 // what lag measured
	produceInst float64
	headAge     float64 // the true head age now, seconds
	dec         Decision
	leases      []Lease
}

type simResult struct {
	cfg   simConfig
	steps []simStep
	// per tick: t and the true head age (seconds)
	tickT, tickHead []float64
}

func runSim(tb testing.TB, cfg simConfig) *simResult {
	tb.Helper()
	if cfg.interval == 0 {
		cfg.interval = time.Second
	}
	if cfg.tick == 0 {
		cfg.tick = 10 * time.Millisecond
	}
	if cfg.partitions == 0 {
		cfg.partitions = 1
	}
	if cfg.pushDelay == 0 {
		cfg.pushDelay = 100 * time.Millisecond
	}
	if cfg.members == nil {
		cfg.members = func(float64) int { return 1 }
	}
	if cfg.ctl.Interval == 0 {
		cfg.ctl.Interval = cfg.interval
	}
	rules := lag.Rules{
		LagAge:     cfg.policy.MaxAge,
		StallAfter: 5 * time.Second,
		StaleAfter: max(3*cfg.interval, 3*time.Second),
		RateWindow: 2 * time.Second,
	}
	tracker := lag.NewTracker(func(lag.Target) lag.Rules { return rules })
	ctl, err := NewController(cfg.ctl)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 7))
	alloc := func(total float64, ds []Demand) []Grant {
		gs := PriorityFair(total, ds)
		checkGrants(tb, total, ds, gs)
		if cfg.check != nil {
			cfg.check(total, ds, gs)
		}
		return gs
	}
	book, err := NewLeaseBook(LeaseConfig{Interval: cfg.interval, Allocator: alloc, Rand: rng.Float64})
	if err != nil {
		tb.Fatal(err)
	}
	target := lag.Target{Kind: lag.KindKafka, Cluster: "sim", Topic: "orders", Group: "billing"}
	topic := TopicOf(target)
	parts := make([]*simPartition, cfg.partitions)
	for i := range parts {
		parts[i] = &simPartition{}
	}
	res := &simResult{cfg: cfg}
	dt := cfg.tick.Seconds()
	perInterval := int(cfg.interval / cfg.tick)
	total := int(cfg.duration / cfg.tick)
	noiseF := 1.0
	now := simT0
	for k := 0; k < total; k++ {
		t := float64(k) * dt
		if k%perInterval == 0 && cfg.noise > 0 {
			noiseF = 1 + cfg.noise*(2*rng.Float64()-1)
		}
		// Leases that have arrived.
		for _, p := range cfg.producers {
			for len(p.pending) > 0 && !p.pending[0].at.After(now) {
				l := p.pending[0].l
				p.pending = p.pending[1:]
				if !p.hasLease {
					p.tokens = float64(l.Burst)
				}
				p.lease, p.hasLease = l, true
			}
		}
		// Produce.
		for _, p := range cfg.producers {
			if !p.active(t) {
				continue
			}
			want := p.offer(t) * dt
			adm := want
			if p.hasLease && !p.lease.Advisory && !p.lease.IsUnlimited() {
				// A fluid token bucket: the bucket holds at least one
				// tick of tokens so that a small burst does not starve.
				p.tokens = min(p.tokens+p.lease.Rate*dt, max(float64(p.lease.Burst), p.lease.Rate*dt))
				adm = min(want, p.tokens)
				p.tokens -= adm
			}
			p.offered += want
			p.admitted += adm
			if t >= cfg.window[0] && t < cfg.window[1] {
				p.winOffered += want
				p.winAdmitted += adm
			}
			if adm <= 0 {
				continue
			}
			var avoid []int32
			if p.honorAvoid && p.hasLease {
				avoid = p.lease.AvoidPartitions
			}
			n := cfg.partitions - len(avoid)
			for i, part := range parts {
				if n < cfg.partitions && slices.Contains(avoid, int32(i)) {
					continue
				}
				share := adm / float64(n)
				part.end += share
				if l := len(part.q); l > 0 && part.q[l-1].t.Equal(now) {
					part.q[l-1].n += share
				} else {
					part.q = append(part.q, chunk{n: share, t: now})
				}
			}
		}
		// Consume: the capacity is pooled over partitions with work, each
		// optionally capped.
		budget := max(cfg.capacity(t)*noiseF, 0) * dt
		for round := 0; round < 3 && budget > 1e-9; round++ {
			var busy []int
			for i, part := range parts {
				if part.backlog() > 1e-9 && (cfg.partCap == nil || cfg.partCap(i, t) < 0 || part.consumedTick < cfg.partCap(i, t)*dt-1e-12) {
					busy = append(busy, i)
				}
			}
			if len(busy) == 0 {
				break
			}
			share := budget / float64(len(busy))
			for _, i := range busy {
				part := parts[i]
				take := min(share, part.backlog())
				if cfg.partCap != nil && cfg.partCap(i, t) >= 0 {
					take = min(take, cfg.partCap(i, t)*dt-part.consumedTick)
				}
				part.take(take)
				budget -= take
			}
		}
		for _, part := range parts {
			part.consumedTick = 0
		}
		now = now.Add(cfg.tick)
		t = float64(k+1) * dt
		head := trueHeadAge(parts, now)
		res.tickT = append(res.tickT, t)
		res.tickHead = append(res.tickHead, head)

		if (k+1)%perInterval != 0 {
			continue
		}
		// Observe.
		s := lag.Sample{Target: target, At: now, Members: cfg.members(t), GroupState: "Stable"}
		if cfg.observeFails != nil && cfg.observeFails(t) {
			s.Err = "broker unreachable"
		} else {
			for i, part := range parts {
				end, cons := int64(math.Floor(part.end+1e-9)), int64(math.Floor(part.consumed+1e-9))
				ps := lag.PartitionSample{Partition: int32(i), End: end, Committed: cons, Lag: max(end-cons, 0)}
				if ps.Lag > 0 && len(part.q) > 0 {
					ps.HeadTime, ps.HeadKnown = part.q[0].t, true
				}
				s.Partitions = append(s.Partitions, ps)
			}
		}
		st := tracker.Observe(s, now)
		dec := ctl.Step(st, cfg.policy, now)
		if dec.Rate < cfg.policy.MinRate {
			tb.Fatalf("t=%.2f: rate %v below the floor %v", t, dec.Rate, cfg.policy.MinRate)
		}
		if dec.Rule == RuleNone {
			tb.Fatalf("t=%.2f: a decision without a rule: %s", t, dec.Reason)
		}
		for _, p := range cfg.producers {
			if !p.active(t) {
				continue
			}
			r := Report{Producer: p.id, Topic: topic, Criticality: p.crit, Demand: p.offer(t)}
			if p.unknown {
				r.Demand = UnknownDemand
			}
			if err := book.Report(r, now); err != nil {
				tb.Fatal(err)
			}
		}
		book.Expire(now)
		leases := book.Apply(dec, cfg.policy, now)
		for _, l := range leases {
			for _, p := range cfg.producers {
				if p.id == l.Producer {
					p.pending = append(p.pending, pendingLease{at: now.Add(cfg.pushDelay), l: l})
				}
			}
		}
		res.steps = append(res.steps, simStep{
			t: t, capacity: cfg.capacity(t - dt), consumeInst: st.ConsumeRateInstant, produceInst: st.ProduceRateInstant,
			headAge: head, dec: dec, leases: leases,
		})
	}
	return res
}

// take consumes n messages from the head of the partition.
func (p *simPartition) take(n float64) {
	p.consumed += n
	p.consumedTick += n
	for n > 1e-12 && len(p.q) > 0 {
		if p.q[0].n <= n {
			n -= p.q[0].n
			p.q = p.q[1:]
			continue
		}
		p.q[0].n -= n
		n = 0
	}
}

func trueHeadAge(parts []*simPartition, now time.Time) float64 {
	var age float64
	for _, p := range parts {
		// Skip fluid crumbs smaller than a message.
		for len(p.q) > 0 && p.q[0].n < 1e-6 {
			p.q = p.q[1:]
		}
		if len(p.q) > 0 && p.backlog() >= 1 {
			age = max(age, now.Sub(p.q[0].t).Seconds())
		}
	}
	return age
}

// checkGrants is the allocation invariant, checked after every allocation of
// every test: the grants never exceed the total plus the floors granted, no
// grant is negative, and no grant exceeds its demand except by headroom
// (capacity nobody asked for, given only when every demand is met).
func checkGrants(tb testing.TB, total float64, ds []Demand, gs []Grant) {
	tb.Helper()
	if len(gs) != len(ds) {
		tb.Fatalf("%d grants for %d demands", len(gs), len(ds))
	}
	if math.IsInf(total, 1) {
		for _, g := range gs {
			if !math.IsInf(g.Rate, 1) {
				tb.Fatalf("unlimited total, finite grant %+v", g)
			}
		}
		return
	}
	var sum, floors float64
	headroom := false
	for i, g := range gs {
		d := ds[i]
		if g.Producer != d.Producer {
			tb.Fatalf("grant %d is for %q, demand for %q", i, g.Producer, d.Producer)
		}
		if g.Rate < 0 || math.IsNaN(g.Rate) || g.Headroom < 0 {
			tb.Fatalf("bad grant %+v", g)
		}
		if g.Rate-g.Headroom > wantOf(d)*(1+1e-9)+1e-9 {
			tb.Fatalf("grant %v (headroom %v) exceeds demand %v for %q", g.Rate, g.Headroom, d.Rate, d.Producer)
		}
		if g.Headroom > 0 {
			headroom = true
		}
		sum += g.Rate
		floors += min(max(d.Floor, 0), wantOf(d))
	}
	if limit := max(total, floors); sum > limit*(1+1e-9)+1e-9 {
		tb.Fatalf("sum of grants %v > max(total %v, floors %v)", sum, total, floors)
	}
	if headroom {
		for i, g := range gs {
			if g.Rate-g.Headroom < wantOf(ds[i])*(1-1e-9)-1e-9 {
				tb.Fatalf("headroom given while %q's demand %v is not met (%v)", g.Producer, ds[i].Rate, g.Rate)
			}
		}
	}
}

// --- helpers for scenarios ---

func constant(r float64) func(float64) float64 { return func(float64) float64 { return r } }

// step returns a before b after t0.
func step(at, before, after float64) func(float64) float64 {
	return func(t float64) float64 {
		if t < at {
			return before
		}
		return after
	}
}

// producersOffering returns n CRITICAL producers sharing total msg/s.
func producersOffering(n int, total float64) []*simProducer {
	ps := make([]*simProducer, n)
	for i := range ps {
		ps[i] = &simProducer{id: fmt.Sprintf("p%02d", i), offer: constant(total / float64(n))}
	}
	return ps
}

func drainPolicy() Policy {
	return Policy{Name: "orders", MaxAge: 2 * time.Second}
}

// after returns the steps with dropT < t <= endT.
func (r *simResult) between(from, to float64) []simStep {
	var out []simStep
	for _, s := range r.steps {
		if s.t > from && s.t <= to {
			out = append(out, s)
		}
	}
	return out
}

// headStats returns the max and the 99th percentile of the true head age
// over ticks in (from, to].
func (r *simResult) headStats(from, to float64) (maxAge, p99 float64) {
	var xs []float64
	for i, t := range r.tickT {
		if t > from && t <= to {
			xs = append(xs, r.tickHead[i])
		}
	}
	if len(xs) == 0 {
		return 0, 0
	}
	slices.Sort(xs)
	return xs[len(xs)-1], xs[int(math.Ceil(0.99*float64(len(xs))))-1]
}

// headUnderFrom returns the first time t in (from, to] from which the true
// head age stays <= limit until to; -1 if never.
func (r *simResult) headUnderFrom(from, to, limit float64) float64 {
	at := -1.0
	for i, t := range r.tickT {
		if t <= from || t > to {
			continue
		}
		if r.tickHead[i] > limit {
			at = -1
		} else if at < 0 {
			at = t
		}
	}
	return at
}

func cv(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var m float64
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return math.Sqrt(v/float64(len(xs))) / m
}

// sustained returns the seconds after from of the first step in (from, to]
// from which ok holds for every later step up to to; -1 if none.
func (r *simResult) sustained(from, to float64, ok func(simStep) bool) float64 {
	at := -1.0
	for _, s := range r.between(from, to) {
		if !ok(s) {
			at = -1
		} else if at < 0 {
			at = s.t - from
		}
	}
	return at
}
