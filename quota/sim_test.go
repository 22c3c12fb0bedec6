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
	// honorAvoid: unkeyed traffic, so it writes around avoided partitions
	// (giving those with a share in the lease their share).
	honorAvoid bool
	// keyed: keyed traffic through the SDK, keys spread over all
	// partitions: the share bound for avoided partitions is refused (the
	// SDK's per-partition refusal), the rest lands where its keys send it.
	keyed bool
	// oldSDK: an SDK before protocol 1.1, which ignores the lease's
	// PartitionShares (an avoided partition gets nothing).
	oldSDK bool
	// stickTo and stuck: with simConfig.sticky, the partition the
	// producer writes to now and what it wrote there since it chose it.
	stickTo int
	stuck   float64

	lease    Lease
	hasLease bool
	pending  []pendingLease
	tokens   float64

	offered, admitted float64 // messages, whole run
	winOffered        float64 // messages inside simConfig.window
	winAdmitted       float64
	// throttled holds what its lease admitted that the broker has not
	// taken yet (simFailover.quota), with the times it was sent at.
	throttled []chunk
}

type pendingLease struct {
	at time.Time
	l  Lease
}

// shares is the lease's PartitionShares as p's SDK reads them.
func (p *simProducer) shares() []PartitionShare {
	if p.oldSDK {
		return nil
	}
	return p.lease.PartitionShares
}

func (p *simProducer) active(t float64) bool { return t >= p.from && (p.to == 0 || t < p.to) }

type chunk struct {
	n float64
	t time.Time
}

type simPartition struct {
	q            []chunk // unconsumed messages, oldest first
	done         []chunk // consumed and not yet committed, oldest first
	end          float64 // messages ever written
	consumed     float64
	committed    float64 // the consumer's committed position
	consumedTick float64 // consumed in the current tick
	// pollEnd is the end of the poll in hand and mark the end of the
	// one before (simConfig.pollCommits).
	pollEnd, mark float64
	// batchEnd is the end of the batch in hand (simConfig.ackBatch).
	batchEnd float64
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
	// commitEvery is the consumer's commit interval (as franz-go's
	// auto-commit: the position consumed so far, on a timer that drifts
	// by up to ±10% per commit, from a seeded source); the observer sees
	// committed positions only, and learns the cadence (State.CommitInterval
	// is set to it when the tracker leaves it unknown). 0: the consumer
	// commits every tick (the observer sees its exact position).
	commitEvery time.Duration
	// firstCommit: the consumer group starts without a committed offset
	// and is seen live (as a member assigned the partitions); the observer
	// sees no commit (Committed -1) before this many seconds, and the
	// consumer's first commit comes then, on its commitEvery timer after.
	// 0: committed from the start.
	firstCommit float64
	// commitAt is when the consumer commits first, in seconds; 0: at 3/7
	// of commitEvery (a phase unrelated to the observations).
	commitAt float64
	// steadyCommits: the commit timer does not drift, so it keeps its
	// phase against the observations (two real timers of one period, as
	// in lagbridge bench); false: it drifts by up to ±10% per commit.
	steadyCommits bool
	// pollCommits: the consumer commits what its previous poll returned,
	// as franz-go's auto-commit does: a poll takes all that is written
	// once the one before is consumed, and the position it started at is
	// what the next commit commits (with a backlog, a poll is seconds of
	// work, and the commits move by polls); false: the position consumed.
	pollCommits bool
	// learnCadence: State.CommitInterval is left as the tracker learns it
	// (unknown until two commits have moved the positions), as the
	// daemon sees it; false: it is set to commitEvery from the first
	// observation.
	learnCadence bool
	// members is the number of group members at t; nil: 1.
	members func(t float64) int
	// observeFails makes the observation at t fail (a sample with Err).
	observeFails func(t float64) bool
	// machineStall: the machine the observer and the consumer run on
	// stalls at t (a loaded host, a paused process): the consumer neither
	// consumes nor commits, and an observation due then is made at the
	// first tick after the stall (a Go ticker keeps one missed tick);
	// the producers, elsewhere, go on.
	machineStall func(t float64) bool
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
	// open: the producers ignore their leases (no lagbridge: what naive
	// producers do), while the loop runs as usual.
	open bool
	// sticky: each producer writes all it sends to one partition until it
	// has written this many messages there, then moves to another one,
	// chosen at random (franz-go's default partitioner for keyless
	// records sticks to a partition for 64 KiB, a few hundred of the
	// bench's records). 0: every producer spreads each tick over all
	// partitions.
	sticky float64
	// failover, when set, plays a second observer (a follower, observing
	// half an interval off the leader) that takes over from the leader
	// killed at failover.kill (see simFailover).
	failover *simFailover
	// reportOwn: each partition's consumer reports its
	// exact position and head at its own pace (the hook, protocol 1.6).
	reportOwn bool
	// natsAcks: a NATS target whose samples carry Sample.LastAck (the
	// last tick the committed position moved), its commit cadence the
	// observation interval as lag/ learns it for such a consumer
	// (testdata/nats1s-5x-idledrop.jsonl).
	natsAcks bool
	// ackBatch: the consumer acks the last message of each batch of up
	// to ackBatch it takes (NATS ack-batch), a batch being what was
	// written when the one before was done.
	ackBatch float64
}

// simFailover is a leader's loss in the simulator, as internal/replica
// plays it: until kill the follower steps its own controller and adopts
// the leader's newest decision before each step (engine.Follow); from kill
// no leases come from the leader (the producers keep the last ones); from
// kill+standIn the follower serves its own leases, standing in
// (Controller.StandIn), and from kill+lead it leads.
type simFailover struct {
	kill, standIn, lead float64
	// quota, when positive, is the Kafka client quota the lost leader
	// left, msg/s per producer: from kill until the new leader writes
	// its own (kill+lead), the broker takes at most that much of what a
	// producer's lease admits and holds the rest back, in order (the
	// client's buffer: the records keep the time they were sent at).
	quota float64
	// steer, when positive, is when (after kill) a follower standing in
	// writes the client quotas in the lost leader's stead
	// (replica.Replicator.ClientQuotaStandIn): from then on they follow
	// its leases and bind no more than those (the quotas it leaves
	// between its last write and the new leader's first are taken to be
	// its leases' too).
	steer float64
}

// simFollower is the follower's own tracker, controller and lease book.
type simFollower struct {
	tracker *lag.Tracker
	ctl     *Controller
	book    *LeaseBook
	last    Decision // the leader's newest decision
	own     Decision // its own newest decision
	led     bool     // it took over
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
	// per tick: t, the true head age (seconds), what the producers offered
	// and were admitted (messages), and whether the consumer had capacity
	// to spare (it consumed less than its capacity in the tick)
	tickT, tickHead         []float64
	tickOffered, tickAdmitd []float64
	tickSpare               []bool
	// per tick: messages consumed within the policy's MaxAge of their
	// production (good) and after it (dead work)
	tickGood, tickDead []float64
}

// sim is the state of one run.
type sim struct {
	cfg     simConfig
	tb      testing.TB
	tracker *lag.Tracker
	ctl     *Controller
	book    *LeaseBook
	rng     *rand.Rand
	target  lag.Target
	parts   []*simPartition
	res     *simResult
	now     time.Time
	// nextCommit is when the consumer commits next (commitEvery > 0).
	nextCommit time.Time
	lastAck    time.Time    // the last commit that moved (simConfig.natsAcks)
	follower   *simFollower // with cfg.failover
}

func runSim(tb testing.TB, cfg simConfig) *simResult {
	tb.Helper()
	s := newSim(tb, cfg)
	cfg = s.cfg
	dt := cfg.tick.Seconds()
	perInterval := int(cfg.interval / cfg.tick)
	total := int(cfg.duration / cfg.tick)
	noiseF := 1.0
	pending := false // an observation due during a machine stall
	for k := 0; k < total; k++ {
		t := float64(k) * dt
		if k%perInterval == 0 && cfg.noise > 0 {
			noiseF = 1 + cfg.noise*(2*s.rng.Float64()-1)
		}
		stalled := cfg.machineStall != nil && cfg.machineStall(t)
		s.deliverLeases()
		offered, admitted := s.produce(t)
		s.now = s.now.Add(cfg.tick)
		capacity := max(cfg.capacity(t)*noiseF, 0) * dt
		if stalled {
			capacity = 0
		}
		spare, good, dead := s.consume(t, capacity)
		if !stalled {
			s.poll()
			s.commit()
		}
		t = float64(k+1) * dt
		r := s.res
		r.tickT = append(r.tickT, t)
		r.tickHead = append(r.tickHead, trueHeadAge(s.parts, s.now))
		r.tickOffered, r.tickAdmitd = append(r.tickOffered, offered), append(r.tickAdmitd, admitted)
		r.tickSpare = append(r.tickSpare, spare)
		r.tickGood, r.tickDead = append(r.tickGood, good), append(r.tickDead, dead)
		due := (k+1)%perInterval == 0 || pending
		pending = due && stalled
		if due && !stalled && (cfg.failover == nil || t < cfg.failover.kill) {
			s.observe(t, dt)
		}
		if cfg.failover != nil && (k+1)%perInterval == perInterval/2 {
			s.observeFollower(t)
		}
	}
	return s.res
}

func newSim(tb testing.TB, cfg simConfig) *sim {
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
		StallAfter: max(5*time.Second, 2*cfg.commitEvery),
		StaleAfter: max(3*cfg.interval, 3*time.Second),
		RateWindow: 2 * time.Second,
	}
	s := &sim{cfg: cfg, tb: tb, now: simT0, res: &simResult{cfg: cfg},
		target: lag.Target{Kind: lag.KindKafka, Cluster: "sim", Topic: "orders", Group: "billing"}}
	if cfg.natsAcks {
		s.target.Kind = lag.KindNATS
	}
	s.tracker = lag.NewTracker(func(lag.Target) lag.Rules { return rules })
	var err error
	if s.ctl, err = NewController(cfg.ctl); err != nil {
		tb.Fatal(err)
	}
	s.rng = rand.New(rand.NewPCG(cfg.seed, 7))
	alloc := func(total float64, ds []Demand) []Grant {
		gs := PriorityFair(total, ds)
		checkGrants(tb, total, ds, gs)
		if cfg.check != nil {
			cfg.check(total, ds, gs)
		}
		return gs
	}
	if s.book, err = NewLeaseBook(LeaseConfig{Interval: cfg.interval, Allocator: alloc, Rand: s.rng.Float64}); err != nil {
		tb.Fatal(err)
	}
	if cfg.failover != nil {
		f := &simFollower{tracker: lag.NewTracker(func(lag.Target) lag.Rules { return rules })}
		if f.ctl, err = NewController(cfg.ctl); err != nil {
			tb.Fatal(err)
		}
		frng := rand.New(rand.NewPCG(cfg.seed, 11)) // its own: the run's draws stay the same
		if f.book, err = NewLeaseBook(LeaseConfig{Interval: cfg.interval, Allocator: alloc, Rand: frng.Float64}); err != nil {
			tb.Fatal(err)
		}
		s.follower = f
	}
	s.parts = make([]*simPartition, cfg.partitions)
	for i := range s.parts {
		s.parts[i] = &simPartition{}
	}
	// The first commit comes at a phase unrelated to the observations.
	s.nextCommit = simT0.Add(cfg.commitEvery * 3 / 7)
	if cfg.commitAt > 0 {
		s.nextCommit = simT0.Add(time.Duration(cfg.commitAt * float64(time.Second)))
	}
	if cfg.firstCommit > 0 {
		s.nextCommit = simT0.Add(time.Duration(cfg.firstCommit*float64(time.Second)) - cfg.tick)
	}
	return s
}

// deliverLeases hands the producers the leases that have arrived.
func (s *sim) deliverLeases() {
	for _, p := range s.cfg.producers {
		for len(p.pending) > 0 && !p.pending[0].at.After(s.now) {
			l := p.pending[0].l
			p.pending = p.pending[1:]
			if !p.hasLease {
				p.tokens = float64(l.Burst)
			}
			p.lease, p.hasLease = l, true
		}
	}
}

// produce runs the producers for one tick and returns what they offered
// and what their leases admitted, in messages.
func (s *sim) produce(t float64) (offered, admitted float64) {
	cfg := &s.cfg
	dt := cfg.tick.Seconds()
	for _, p := range cfg.producers {
		if !p.active(t) {
			continue
		}
		want := p.offer(t) * dt
		offer := want
		if p.keyed && p.hasLease && !p.lease.Advisory && len(p.lease.AvoidPartitions) < cfg.partitions {
			// Refused before it takes a token: bound for an avoided
			// partition, but for the part its share lets through.
			let := 0.0
			for _, ps := range p.shares() {
				let += min(ps.Share*float64(cfg.partitions), 1)
			}
			want *= 1 - (float64(len(p.lease.AvoidPartitions))-let)/float64(cfg.partitions)
		}
		adm := want
		if !cfg.open && p.hasLease && !p.lease.Advisory && !p.lease.IsUnlimited() {
			// A fluid token bucket: the bucket holds at least one
			// tick of tokens so that a small burst does not starve.
			p.tokens = min(p.tokens+p.lease.Rate*dt, max(float64(p.lease.Burst), p.lease.Rate*dt))
			adm = min(want, p.tokens)
			p.tokens -= adm
		}
		p.offered += offer
		p.admitted += adm
		offered += offer
		admitted += adm
		if t >= cfg.window[0] && t < cfg.window[1] {
			p.winOffered += offer
			p.winAdmitted += adm
		}
		if adm <= 0 {
			continue
		}
		var avoid []int32
		if (p.honorAvoid || p.keyed) && p.hasLease {
			avoid = p.lease.AvoidPartitions
		}
		if cfg.sticky > 0 {
			s.stick(p, adm, avoid)
			continue
		}
		if fo := cfg.failover; fo != nil && (fo.quota > 0 || len(p.throttled) > 0) {
			s.throttle(p, t, adm)
			continue
		}
		n := cfg.partitions - len(avoid)
		rest := adm
		if (p.honorAvoid || p.keyed) && p.hasLease && n < cfg.partitions {
			// An avoided partition with a share gets it: keyless, that
			// share of the records; keyed, share·partitions of those
			// its keys send it (the rest were refused above).
			let := 0.0
			for _, ps := range p.shares() {
				let += min(ps.Share*float64(cfg.partitions), 1)
			}
			for _, ps := range p.shares() {
				got := adm * ps.Share
				if p.keyed {
					got = adm * min(ps.Share*float64(cfg.partitions), 1) / (float64(n) + let)
				}
				part := s.parts[ps.Partition]
				part.end += got
				part.q = appendChunk(part.q, got, s.now)
				rest -= got
			}
		}
		for i, part := range s.parts {
			if n < cfg.partitions && slices.Contains(avoid, int32(i)) {
				continue
			}
			share := rest / float64(n)
			part.end += share
			part.q = appendChunk(part.q, share, s.now)
		}
	}
	return offered, admitted
}

// throttle passes adm messages of p, sent now, through the client quota
// the lost leader left (simFailover.quota) and writes what the broker
// takes, spread over the partitions, at the times it was sent.
func (s *sim) throttle(p *simProducer, t, adm float64) {
	fo := s.cfg.failover
	p.throttled = appendChunk(p.throttled, adm, s.now)
	room := math.Inf(1)
	end := fo.kill + fo.lead
	if fo.steer > 0 {
		end = min(end, fo.kill+fo.steer)
	}
	if t >= fo.kill && t < end {
		room = fo.quota * s.cfg.tick.Seconds()
	}
	for room > 1e-12 && len(p.throttled) > 0 {
		c := &p.throttled[0]
		n := min(c.n, room)
		for _, part := range s.parts {
			part.end += n / float64(len(s.parts))
			part.q = appendChunk(part.q, n/float64(len(s.parts)), c.t)
		}
		room -= n
		if c.n -= n; c.n <= 1e-12 {
			p.throttled = p.throttled[1:]
		}
	}
}

// stick writes adm messages of p to the partition it sticks to, and
// moves it to another partition (not avoided) once it wrote
// simConfig.sticky messages there.
func (s *sim) stick(p *simProducer, adm float64, avoid []int32) {
	n := s.cfg.partitions
	if slices.Contains(avoid, int32(p.stickTo)) || p.stuck >= s.cfg.sticky {
		next := p.stickTo
		for range 2 * n {
			next = s.rng.IntN(n)
			if next != p.stickTo && !slices.Contains(avoid, int32(next)) {
				break
			}
		}
		p.stickTo, p.stuck = next, 0
	}
	part := s.parts[p.stickTo]
	part.end += adm
	part.q = appendChunk(part.q, adm, s.now)
	p.stuck += adm
}

func appendChunk(q []chunk, n float64, t time.Time) []chunk {
	if l := len(q); l > 0 && q[l-1].t.Equal(t) {
		q[l-1].n += n
		return q
	}
	return append(q, chunk{n: n, t: t})
}

// consume spends budget messages of capacity on the partitions with work,
// pooled, each optionally capped; it reports whether some was left unused,
// and the messages it consumed within MaxAge of their production (good)
// and after it (dead), their age taken at the end of the tick (s.now).
func (s *sim) consume(t, budget float64) (spare bool, good, dead float64) {
	cfg := &s.cfg
	dt := cfg.tick.Seconds()
	for round := 0; round < 3 && budget > 1e-9; round++ {
		var busy []int
		for i, part := range s.parts {
			if part.backlog() > 1e-9 && (cfg.partCap == nil || cfg.partCap(i, t) < 0 || part.consumedTick < cfg.partCap(i, t)*dt-1e-12) {
				busy = append(busy, i)
			}
		}
		if len(busy) == 0 {
			break
		}
		share := budget / float64(len(busy))
		for _, i := range busy {
			part := s.parts[i]
			take := min(share, part.backlog())
			if cfg.partCap != nil && cfg.partCap(i, t) >= 0 {
				take = min(take, cfg.partCap(i, t)*dt-part.consumedTick)
			}
			g, d := part.take(take, s.now, s.cfg.policy.MaxAge)
			good, dead = good+g, dead+d
			budget -= take
		}
	}
	for _, part := range s.parts {
		part.consumedTick = 0
	}
	return budget > 1e-6, good, dead
}

// commit moves the committed positions: every tick without a commit
// interval, else when the drifting commit timer fires.
func (s *sim) commit() {
	if s.cfg.commitEvery > 0 {
		if s.now.Before(s.nextCommit) {
			return
		}
		drift := 1 + 0.1*(2*s.rng.Float64()-1)
		if s.cfg.steadyCommits {
			drift = 1
		}
		s.nextCommit = s.nextCommit.Add(time.Duration(float64(s.cfg.commitEvery) * drift))
	}
	if s.cfg.ackBatch > 0 {
		s.ackBatches()
		return
	}
	for _, part := range s.parts {
		if part.consumed > part.committed+1e-9 {
			s.lastAck = s.now
		}
		if !s.cfg.pollCommits {
			part.committed, part.done = part.consumed, part.done[:0]
			continue
		}
		part.commitTo(part.mark)
	}
}

// commitTo commits p up to pos (never back), dropping what it covers
// from p.done.
func (p *simPartition) commitTo(pos float64) {
	for n := pos - p.committed; n > 1e-12 && len(p.done) > 0; {
		if p.done[0].n <= n {
			n -= p.done[0].n
			p.done = p.done[1:]
			continue
		}
		p.done[0].n -= n
		n = 0
	}
	p.committed = max(p.committed, pos)
}

// ackBatches acks each batch done (simConfig.ackBatch) and takes the next.
func (s *sim) ackBatches() {
	for _, part := range s.parts {
		for part.consumed >= part.batchEnd-1e-9 {
			if part.batchEnd > part.committed+1e-9 {
				part.commitTo(part.batchEnd)
				s.lastAck = s.now
			}
			avail := part.end - part.batchEnd
			if avail < 1e-9 {
				break
			}
			part.batchEnd += min(s.cfg.ackBatch, avail)
		}
	}
}

// poll starts the next poll once the one in hand is consumed (see
// simConfig.pollCommits): the one in hand becomes what a commit commits.
func (s *sim) poll() {
	if !s.cfg.pollCommits {
		return
	}
	for _, part := range s.parts {
		if part.consumed < part.pollEnd-1e-9 {
			return
		}
	}
	for _, part := range s.parts {
		part.mark, part.pollEnd = part.pollEnd, part.end
	}
}

// observe is one observation: a sample of the committed positions, the
// tracker, the controller, the lease book, and the leases on their way.
func (s *sim) observe(t, dt float64) {
	cfg, tb, now := &s.cfg, s.tb, s.now
	smp := lag.Sample{Target: s.target, At: now, Members: cfg.members(t), GroupState: "Stable"}
	if cfg.natsAcks {
		smp.LastAck = s.lastAck
	}
	noCommit := t < cfg.firstCommit
	if cfg.firstCommit > 0 {
		smp.Live = lag.LiveYes
	}
	if cfg.observeFails != nil && cfg.observeFails(t) {
		smp.Err = "broker unreachable"
	} else {
		for i, part := range s.parts {
			end, cons := int64(math.Floor(part.end+1e-9)), int64(math.Floor(part.committed+1e-9))
			ps := lag.PartitionSample{Partition: int32(i), End: end, Committed: cons, Lag: max(end-cons, 0)}
			if head, ok := part.committedHead(); ok && ps.Lag > 0 {
				ps.HeadTime, ps.HeadKnown = head, true
			}
			if noCommit {
				ps = lag.PartitionSample{Partition: int32(i), End: end, Committed: -1}
			}
			if cfg.reportOwn {
				rep := lag.Report{At: now, Position: min(int64(math.Floor(part.consumed+1e-9)), end), OwnPace: true}
				if rep.Position < end {
					for _, c := range part.q {
						if c.n >= 1e-6 {
							rep.HeadTime = c.t
							break
						}
					}
				}
				ps.Reported = rep
			}
			smp.Partitions = append(smp.Partitions, ps)
		}
	}
	st := s.tracker.Observe(smp, now)
	if cfg.natsAcks && st.CommitInterval == 0 && st.Source != lag.SourceFirstSight {
		st.CommitInterval = cfg.interval
	}
	if st.CommitInterval == 0 && st.Source != lag.SourceFirstSight && !cfg.learnCadence {
		st.CommitInterval = cfg.commitEvery
	}
	dec := s.ctl.Step(st, cfg.policy, now)
	if dec.Rate < cfg.policy.MinRate {
		tb.Fatalf("t=%.2f: rate %v below the floor %v", t, dec.Rate, cfg.policy.MinRate)
	}
	if dec.Rule == RuleNone {
		tb.Fatalf("t=%.2f: a decision without a rule: %s", t, dec.Reason)
	}
	topic := TopicOf(s.target)
	for _, p := range cfg.producers {
		if !p.active(t) {
			continue
		}
		r := Report{Producer: p.id, Topic: topic, Criticality: p.crit, Demand: p.offer(t)}
		if p.unknown {
			r.Demand = UnknownDemand
		}
		if err := s.book.Report(r, now); err != nil {
			tb.Fatal(err)
		}
	}
	s.book.Expire(now)
	leases := s.book.Apply(TopicDecision(dec), cfg.policy, now) // one group: its decision is its topic's
	for _, l := range leases {
		for _, p := range cfg.producers {
			if p.id == l.Producer {
				p.pending = append(p.pending, pendingLease{at: now.Add(cfg.pushDelay), l: l})
			}
		}
	}
	if s.follower != nil {
		s.follower.last = dec
	}
	s.res.steps = append(s.res.steps, simStep{
		t: t, capacity: cfg.capacity(t - dt), consumeInst: st.ConsumeRateInstant, produceInst: st.ProduceRateInstant,
		headAge: trueHeadAge(s.parts, now), dec: dec, leases: leases,
	})
}

// sample is what an observer reads at t: the committed positions.
func (s *sim) sample(t float64) lag.Sample {
	cfg := &s.cfg
	smp := lag.Sample{Target: s.target, At: s.now, Members: cfg.members(t), GroupState: "Stable"}
	for i, part := range s.parts {
		end, cons := int64(math.Floor(part.end+1e-9)), int64(math.Floor(part.committed+1e-9))
		ps := lag.PartitionSample{Partition: int32(i), End: end, Committed: cons, Lag: max(end-cons, 0)}
		if head, ok := part.committedHead(); ok && ps.Lag > 0 {
			ps.HeadTime, ps.HeadKnown = head, true
		}
		smp.Partitions = append(smp.Partitions, ps)
	}
	return smp
}

// observeFollower is one observation of the follower (cfg.failover): it
// steps its controller on its own reading, after adopting the leader's
// newest decision while the leader lives, and from the stand-in on serves
// its own leases (recorded as the run's steps).
func (s *sim) observeFollower(t float64) {
	f, fo, now := s.follower, s.cfg.failover, s.now
	st := f.tracker.Observe(s.sample(t), now)
	if t < fo.kill && f.last.Rule != RuleNone {
		f.ctl.Adopt(f.last)
	}
	serving := t >= fo.kill+fo.standIn
	if t >= fo.kill+fo.lead && !f.led {
		// Taking over (replica.followLast): it goes on from its own
		// decision if it stood in, else from the former leader's last.
		f.led = true
		if fo.standIn < fo.lead {
			f.ctl.Adopt(f.own)
		} else if f.last.Rule != RuleNone {
			f.ctl.Adopt(f.last)
		}
	}
	f.ctl.StandIn(serving && t < fo.kill+fo.lead)
	dec := f.ctl.Step(st, s.cfg.policy, now)
	f.own = dec
	topic := TopicOf(s.target)
	for _, p := range s.cfg.producers {
		if p.active(t) {
			if err := f.book.Report(Report{Producer: p.id, Topic: topic, Criticality: p.crit, Demand: p.offer(t)}, now); err != nil {
				s.tb.Fatal(err)
			}
		}
	}
	f.book.Expire(now)
	leases := f.book.Apply(TopicDecision(dec), s.cfg.policy, now)
	if !serving {
		return
	}
	for _, l := range leases {
		for _, p := range s.cfg.producers {
			if p.id == l.Producer {
				p.pending = append(p.pending, pendingLease{at: now.Add(s.cfg.pushDelay), l: l})
			}
		}
	}
	s.res.steps = append(s.res.steps, simStep{t: t, capacity: s.cfg.capacity(t), dec: dec, leases: leases})
}

// take consumes n messages from the head of the partition at now and
// returns how many were at most maxAge old then (good) and how many older
// (dead).
func (p *simPartition) take(n float64, now time.Time, maxAge time.Duration) (good, dead float64) {
	p.consumed += n
	p.consumedTick += n
	count := func(c chunk) {
		if now.Sub(c.t) <= maxAge {
			good += c.n
		} else {
			dead += c.n
		}
	}
	for n > 1e-12 && len(p.q) > 0 {
		if p.q[0].n <= n {
			n -= p.q[0].n
			count(p.q[0])
			p.done = appendChunk(p.done, p.q[0].n, p.q[0].t)
			p.q = p.q[1:]
			continue
		}
		p.q[0].n -= n
		count(chunk{n: n, t: p.q[0].t})
		p.done = appendChunk(p.done, n, p.q[0].t)
		n = 0
	}
	return good, dead
}

// committedHead is the production time of the message at the committed
// position: what an observer that sees commits reads as the head.
func (p *simPartition) committedHead() (time.Time, bool) {
	for _, q := range [][]chunk{p.done, p.q} {
		for _, c := range q {
			if c.n >= 1e-6 {
				return c.t, true
			}
		}
	}
	return time.Time{}, false
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
