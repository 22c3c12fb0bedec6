package quota

import (
	"fmt"
	"math"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// Controller turns successive [lag.State] values of each target into
// [Decision] values. It keeps a small record per target (the rate in force,
// whether it limits, the last decision). The control law is documented in
// docs/quota-control.md.
//
// A Controller is not safe for concurrent use: one loop owns it.
type Controller struct {
	cfg     ControllerConfig
	targets map[lag.Target]*control
	// standIn: the decisions are served by a replica standing in for a
	// silent leader (see StandIn).
	standIn bool
	// sightAsIs: a partition without a commit is read as lag/ gives it
	// (no committedSight). Only tests set it, to replay recordings whose
	// case arose from that reading.
	sightAsIs bool
}

type control struct {
	// has is true once a decision was made from fresh data.
	has       bool
	last      Decision
	lastAt    time.Time // State.At of that data
	lastFresh time.Time // now of that decision
	limited   bool
	rate      float64 // rate in force while limited
	capacity  float64 // smoothed consume rate, msg/s
	// othersLag is the lag, messages, of the partitions producers did not
	// avoid at the last decision from fresh data (see idleBefore).
	othersLag float64
	// floor is the standing wait the target showed while healthy,
	// seconds; floorSeen counts the readings it was learned from.
	floor     float64
	floorSeen int
	// floorTold: a trial told tc.floor a standing wait (raiseFloor, for
	// trialUnderCut and relearnStanding); never reset.
	floorTold bool
	// floorEarly: tc.floor holds a standing wait learned from the first
	// floorLearn readings (see learnFloor); floorLess counts the healthy
	// readings since that showed a much smaller one (limited episodes between
	// them do not break the count), floorLow the largest
	// of them, seconds.
	floorEarly bool
	floorLess  int
	floorLow   float64
	// headKept is the oldest head at the commit, seconds, of the healthy
	// readings of a consumer read through its commits that showed it
	// keeping up (on their own or over two moves), forgotten over
	// floorMemory, learned before its cadence is (see noQueueAtCommit).
	headKept float64
	// keptRate: the highest produce rate a consumer read through its
	// commits kept up with while unlimited, forgotten over floorMemory,
	// msg/s (see drainedAtCommits).
	keptRate float64
	// satCap is the highest capacity estimate of the readings the law
	// decided as saturated (RuleSaturated) since the target was last
	// judged unlimited or adopted unlimited, msg/s (see restoredProbe).
	// restored: a probe-restored step was taken since then (restoredProbe
	// takes one an episode when keptRate is not known).
	satCap   float64
	restored bool
	// satNew is the highest capacity estimate of the readings decided
	// saturated since the last drain (RuleDrain) or since the target was
	// last unlimited (judged, or adopted), msg/s, and satSeen how many
	// there were (see restoredProbe).
	satNew  float64
	satSeen int
	// learnedSeen counts the measured readings with a learned cadence,
	// measuredSeen all measured readings.
	learnedSeen, measuredSeen int
	// ceiling is the capacity the consumer showed: its capacity when last
	// saturated, raised by any higher rate it consumed since, msg/s.
	ceiling float64
	// moveAt is the State.At of the last observation that measured the
	// consumption (the position moved, or there was nothing to consume);
	// spanProduced the messages produced since.
	moveAt       time.Time
	spanProduced float64
	// moveLag is the lag at moveAt (see reportStill).
	moveLag int64
	// moveGap is the spacing of the readings at moveAt when a move was
	// seen there, seconds (0 otherwise; see moveSpan).
	moveGap float64
	// movePoll is when the poll the consumer's report showed at
	// movePollAt started (see reportedPoll); zero: not known.
	movePoll, movePollAt time.Time
	// ownBefore, prodBefore: the consume and produce rates (msg/s) over
	// the last two moves, each alone (reading.own), the newest first (see
	// Controller.fell).
	ownBefore, prodBefore [2]float64
	interval              float64 // smoothed observation interval, seconds
	// pollPos is the committed position (the sum over the partitions with
	// a commit) last seen to move, pollAt the State.At it was seen at and
	// pollLag the committed lag then (see pollOverdue).
	pollPos, pollLag int64
	pollAt           time.Time
	// shadowUntil: readings up to this time are in the shadow of an
	// observer's stall (see observerStall), after a gap of shadowGap
	// seconds between observations.
	shadowUntil time.Time
	shadowGap   float64
	// paused: the last decision paused admission on a step down;
	// pauseHead and pauseAt are that observation's head age, seconds,
	// and time (see stillAfterPause), pauseCommits and pauseMove its
	// partitions' committed offsets and when they last moved; stillHeld:
	// the pause was kept because nothing was consumed since (see endHold).
	paused       bool
	stillHeld    bool
	pauseHead    float64
	pauseAt      time.Time
	pauseCommits []partCommit
	pauseMove    time.Time
	// headLate: the last observation's head was older than MaxAge.
	headLate bool
	// saturated: the last observation that measured the consumption found
	// the consumer saturated; moveBacklog is the backlog it saw.
	saturated   bool
	moveBacklog float64
	release     int // consecutive observations with the rate unused
	// hardStopped: the last decision was a stop for hard age.
	hardStopped bool
	// lastCommit is the newest commit of the target's partitions seen
	// (PartitionState.LastCommit); caughtUp: at that commit the consumer
	// had consumed everything written before it (see caughtUpAtCommit).
	lastCommit time.Time
	caughtUp   bool
	// blindCap: the highest rate a probe may reach until the next commit
	// of a consumer caught up at its last one, msg/s.
	blindCap float64
	// Between the commits of a consumer that commits less often than it
	// is observed (see caughtUpAtCommit and blindStep): behindAt, its
	// last commit showed a backlog beyond what the dating of the commit
	// explains; sureCaught, it showed the consumer caught up whatever
	// the dating (or caught up again after a span in which the
	// producers used capCap); overshot, a commit showed it behind after
	// a span without a drain (the controller's own admission put it
	// there), until a commit after a drain; drained, a drain was
	// decided since the last commit; capCap, the highest rate a probe
	// may reach until the next commit while overshot, msg/s.
	behindAt, sureCaught, overshot, drained bool
	capCap, capBase                         float64
	// reopen: what the consumer showed when a commit re-opened producers
	// held at 0 (see reopenCap).
	reopen reopened
	// sinceCommit: messages produced since lastCommit.
	sinceCommit float64
	// spanAt and spanPos: the newest commit of a consumer whose position
	// is estimated between commits, and the sum of its committed offsets
	// then (see commitSpan).
	spanAt  time.Time
	spanPos int64
	// span2At and span2Pos: the commit before that one (see pollBurst).
	span2At  time.Time
	span2Pos int64
	// capBefore: the capacity estimate before the previous reading updated
	// it (see pollBurst).
	capBefore float64
	// prevMove is what the previous move of a position read from commits
	// measured (see consumption).
	prevMove moveWindow
	// quick counts the moves in a row, each one observation after the
	// one before, of a position read from commits: from two on, the
	// consumer commits at least once per observation (see cadence).
	// still: while the cadence is not learned, the position (with lag)
	// was seen not to move in an observation: the consumer may commit
	// less often than it is observed.
	quick int
	still bool
	// sightAt: when a live group without a commit was first seen
	// (lag.SourceFirstSight), while its position has not moved since;
	// zero otherwise (see overdue).
	sightAt time.Time
	// capLower: the capacity estimate rests on a lower bound of the
	// consumer's rate (see reading.lower).
	capLower bool
	// stalled: the last reading that measured the consumption consumed
	// nothing with work waiting; the estimate was kept from before it
	// (see estimateCapacity).
	stalled bool
	// fellFrom is the capacity estimate a reading of the consumer's
	// reports lowered by more than a step (StepThreshold), the first such
	// since the target was last unlimited, msg/s (0: none); fellSpent: a
	// reading has climbed back from it since (see climbBack). hand is
	// what the reports held at the last reading. drainRate is the rate a
	// reading not caught up read (the climb back's measure) at drainAt.
	// climbTo is the estimate the climb back restored (0: none, or no
	// longer on trial), climbAt the reading's time, climbKept how many
	// caught-up readings have kept it since (see rearmClimb).
	fellFrom  float64
	fellSpent bool
	// lateWork is what the whole consumer did (less its counted skips)
	// at a reading whose avoided partitions' drain, taken out, lowered
	// the capacity estimate by more than a step, up to the estimate
	// before it, msg/s (0: none since; see lateShareBack).
	lateWork  float64
	hand      handMark
	drainRate float64
	drainAt   time.Time
	climbTo   float64
	climbAt   time.Time
	climbKept int
	// prevHead is the head at the commit, seconds, of the last measured
	// reading with a known head (-1: none; see standingUnderCut).
	prevHead float64
	// underCut counts the measured readings in a row whose wait may be
	// the standing wait of the commit cadence (see standingUnderCut);
	// trialHead is the head at the commit when a probe was let through
	// to tell (0: none).
	underCut  int
	trialHead float64
	// staleSeen counts the measured readings in a row whose head at the
	// commit may be a standing wait the learned one (tc.floor) no longer
	// fits (see relearnStanding); staleHead is the head at the commit
	// when a probe was let through to tell (0: none), staleTell the
	// readings since.
	staleSeen int
	staleHead float64
	staleTell int
	// staleBy is when the verdict of that probe is due (see
	// staleDue): one not told by then is dropped.
	staleBy time.Time
	// shown is the highest consume rate measured while limited (from
	// the first reading after the cut on), msg/s (see unlearnedStale).
	shown float64
	// staleSpent: while limited, a trial of a consumer whose commit
	// phase is not seen to matter (see phaseShown) found a queue; no
	// other is let through until the target is unlimited again.
	staleSpent bool
	// skipAt is the State.At of the last reading in which a consumer
	// that commits about once per observation had not committed (see
	// staleStanding): its commit timer's phase crossed the observations'.
	skipAt time.Time
	parts  map[int32]partTrack
	gen    uint64
	// partsAt: tc.parts was recorded from a reading before the first
	// fresh one (rates not known yet), at this time (see sightParts);
	// zero once a fresh reading was decided on.
	partsAt time.Time
}

// moveWindow is what one move of the position measured: messages consumed
// and produced over its span (seconds).
//
// held: the rate a skip hold held the move at, where the move could be
// a skip burst (0: none, or it could not), msg/s; the next move is
// measured over the two with this one at most that fast (see skipHold).
type moveWindow struct{ msgs, produced, span, held float64 }

// partTrack is what the controller remembers of one partition.
type partTrack struct {
	pos  int64 // consumed position (End - Lag)
	lag  int64
	late bool // listed for avoidance
	gen  uint64
	// in and out are what was written to the partition and what its
	// consumer drained in the last interval, msg/s, out less what it
	// skipped where that is counted (see leaveOutLate).
	in, out float64
	// calm counts the observations in a row a listed partition was
	// comfortably inside the deadline (see lateParts).
	calm int
	// rate is the partition's consume rate, msg/s, measured between two
	// moves of its position while it had a backlog (0: not known); movePos
	// and moveAt are its position and the time at its last move.
	rate    float64
	movePos int64
	moveAt  time.Time
	// moveLag is its lag at its last move.
	moveLag int64
	// handAt is the State.At at which a position from the consumer's
	// reports with work in hand was first seen, handLag the lag then
	// (zero: none in hand; see reportedWait).
	handAt  time.Time
	handLag int64
	// inAvg is in smoothed over about a second (see fedLimited).
	inAvg float64
	// calmFor is how long, seconds, it was calm (as calm counts).
	// probe is how long, seconds, its next trial waits for (0:
	// avoidProbe); trial is the time since it was last tried again,
	// seconds, while that is being watched (0: not watched).
	calmFor, probe, trial float64
	// limit is the keyless rate, msg/s, a listed partition is fed (see
	// partLimit); 0: none, avoided outright.
	limit float64
	// full: rate was measured between two moves that left work behind
	// (the consumer's capacity; see knownSlow). capSeen: full was so at
	// some observation since the partition was last unlisted (see
	// holdLate).
	full, capSeen bool
	// slowed: over the interval it drained less than half what the other
	// partitions drained on average, and less than it is fed (see
	// slowAlone).
	slowed bool
	// head is its HeadAge at this observation, seconds (see sharedRise).
	head float64
	// committed is its committed offset at this observation; freshAt the
	// State.At of its last observation that was not between two of its
	// commits (see betweenCommits).
	committed int64
	freshAt   time.Time
}

// avoidCalm is how many observations in a row a listed partition must be
// comfortably inside the deadline (no backlog, or head and wait within
// the target wait) before it is no longer avoided; avoidProbe is how long
// (seconds) it must, when the rate it was seen to consume at is below the
// share of the produce rate it would get back, before it is tried
// again (its consumer may have recovered, which nothing shows while it is
// avoided). A partition late again within probeWatch seconds of such a
// trial failed it: its next trial waits twice as long, up to maxProbe;
// one that stays fine for probeWatch passed it, and the wait is
// avoidProbe again. The trials are timed in seconds, not observations: a
// trial costs what the partition gets until it is seen late again, the
// same at any interval.
const (
	avoidCalm  = 3
	avoidProbe = 30.0
	probeWatch = 10.0
	maxProbe   = 8 * avoidProbe
)

// NewController returns a Controller, or the problems of cfg (see
// [ControllerConfig.Validate]).
func NewController(cfg ControllerConfig) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg.withDefaults(), targets: make(map[lag.Target]*control)}, nil
}

// Forget drops the record of t (a target no longer observed).
func (c *Controller) Forget(t lag.Target) { delete(c.targets, t) }

// Len is the number of targets with a record.
func (c *Controller) Len() int { return len(c.targets) }

// Step folds st, the newest state of its target, into a decision as of now,
// under policy p (which must be valid; an invalid one gives an unlimited
// decision that says so).
//
// Call it once per observation of the target. A state with the same At as
// the previous call brings no new rates: the previous decision is returned
// again (with At set to now). A stale state (lag.StatusStale, or rates not
// yet known) holds the last decision for up to MaxHold after it was made,
// then fails open. An abandoned target (lag.StatusAbandoned) is unlimited
// with signal ok and never binds its topic (see [CombineTopic]).
//
// Every decision names the rule that made it in Decision.Rule; the rules
// and when each fires are tabled in docs/quota-control.md.
func (c *Controller) Step(st lag.State, p Policy, now time.Time) Decision {
	tc := c.targets[st.Target]
	if tc == nil {
		tc = &control{}
		c.targets[st.Target] = tc
	}
	d := Decision{
		Target:   st.Target,
		Policy:   p.Name,
		At:       now,
		Rate:     Unlimited,
		Advisory: p.Mode.Advisory(),
		MinRate:  p.MinRate,
		HeadAge:  st.HeadAge,
		Lag:      st.Lag,
		// The rate is known only with RatesKnown; NaN never travels.
		ProduceRate: produceRate(st),
	}
	switch {
	case p.MaxAge <= 0 || p.Budget() <= 0:
		d.Rule, d.Reason = RuleInvalidPolicy, "invalid policy (maxAge - processingTime <= 0): unlimited"
		return d
	case st.Status == lag.StatusAbandoned:
		// Reported, never obeyed; start from scratch if it comes back.
		*tc = control{}
		d.Rule, d.Reason = RuleAbandoned, "no live consumer ("+orDash(st.Reason)+"): abandoned, binds no producer"
		return d
	case st.Status == lag.StatusStale || !st.RatesKnown || st.At.IsZero():
		return c.unfresh(tc, d, &st, now)
	case tc.has && !st.At.After(tc.lastAt):
		// Same observation again: nothing new to decide on.
		r := tc.last
		r.At = now
		return r
	}
	if !c.sightAsIs {
		committedSight(&st)
	}
	var v reading
	c.measure(tc, &st, &p, &v)
	held := tc.limited && tc.rate <= 0
	c.reopenSpan(tc, &st, &v)
	rule, reason := c.regime(tc, &st, &v)
	noteReopen(tc, &st, &v, held)
	if v.relearn && rule != RuleRelearn {
		// The trial did not go through (another rule decided): nothing
		// to tell from the next reading; the next qualifying one tries.
		tc.staleHead, tc.staleSeen = 0, floorLearn-1
	}
	c.signal(tc, &d, &st, &p, &v, rule, reason)
	tc.has, tc.last, tc.lastAt, tc.lastFresh = true, d, st.At, now
	tc.headLate = v.headAge > p.MaxAge.Seconds()
	tc.hand = handOf(&st, tc.hand.parts)
	// A reading that read still keeps the pause whether it paused or
	// drained (see keptPause), and the commit that ends it is read by
	// endHold either way.
	tc.paused = v.stepDown && v.engaged && st.Status != lag.StatusStopped
	tc.stillHeld = tc.paused && v.stillHead
	tc.pauseHead, tc.pauseAt = st.HeadAge.Seconds(), st.At
	tc.pauseCommits, tc.pauseMove = tc.pauseCommits[:0], lastMove(&st)
	if tc.paused {
		tc.pauseCommits = appendCommits(tc.pauseCommits, &st)
	}
	return d
}

// committedSight reads st from its commits when the only partitions that
// make it lag.SourceFirstSight are ones its group has not committed yet
// while it commits the others: a group whose every other partition with a
// position is read from its commits (lag.SourceCommits), at least one of
// them with a commit. Such a partition had nothing to consume when the
// group was first seen (its end was its first-sight position: a sticky
// partitioner had sent nothing there yet) and its first records came
// since; the consumer has had nothing to commit there before them, so its
// position is what the group commits, at the group's cadence. Read as a
// group without a commit (lag/ takes a target's source from its least
// exact partition with lag), every commit-aware reading (the commit
// slack, the standing wait, a first reading of uncommitted work) was off
// for the whole target, and a healthy consumer was limited at its
// learned cadence's standing wait: "saturated: capacity 801/s, wait
// 943ms" at the third fresh reading of a franz-go 1 s auto-commit read
// every second (800 msg/s offered, 2,000 of capacity), held at 620/s
// until the drop, the source flipping between first-seen and commits as
// the sticky partitioner reached partitions empty at first sight
// (lagbridge bench kafka/autocommit-1s/sync/1s on Kafka 4.3.1;
// TestControllerUncommittedPartitionOfCommittingGroup). A partition its
// consumer does not consume still shows: its head ages past the
// interval, as on a committed partition. The state's Uncertainty, the
// time since first sight on such a partition, is that of the committed
// partitions (none for commits).
func committedSight(st *lag.State) {
	if st.Source != lag.SourceFirstSight {
		return
	}
	committed := false
	for i := range st.Partitions {
		switch ps := &st.Partitions[i]; ps.Source {
		case lag.SourceFirstSight, "":
		case lag.SourceCommits:
			committed = committed || ps.Committed >= 0
		default:
			return
		}
	}
	if committed {
		st.Source, st.Uncertainty = lag.SourceCommits, 0
	}
}

// unfresh decides on a state without fresh rates: the last fresh decision,
// held, for up to MaxHold after it was made; then unlimited, and the record
// starts from scratch when data returns.
func (c *Controller) unfresh(tc *control, d Decision, st *lag.State, now time.Time) Decision {
	if tc.has && now.Sub(tc.lastFresh) <= c.cfg.MaxHold {
		h := tc.last
		h.At, h.Held, h.Rule = now, true, RuleHold
		h.Reason = fmt.Sprintf("no fresh data (%s): holding the decision of %s", orDash(st.Reason), tc.lastFresh.Format(time.RFC3339Nano))
		return h
	}
	*tc = control{}
	if !st.RatesKnown && st.Status != lag.StatusStale && !st.At.IsZero() {
		sightParts(tc, st)
	}
	if st.RatesKnown || st.Status == lag.StatusStale {
		d.Rule, d.Reason = RuleFailOpen, fmt.Sprintf("no fresh data for more than %s (%s): fail-open", c.cfg.MaxHold, orDash(st.Reason))
	} else {
		d.Rule, d.Reason = RuleRatesUnknown, "rates not known yet: unlimited"
	}
	return d
}

// sightParts records the partitions of a reading whose rates are not
// known yet (a new group's first), as lateParts records a partition it
// sees for the first time, so that the first fresh decision knows each
// partition's lag and position one reading before: how much its lag grew
// and how fast its consumer drained it (see partWait). Without it, a
// partition that holds a new group's backlog alone had no rate of its own
// at that decision, was judged at its share of the target's consume rate,
// and got another interval of a sticky partitioner's batches before it
// was listed (seen on real Kafka and kfake: 120-190 records of a 20 msg/s
// partition, 6-9 s of its work, before the first listing).
func sightParts(tc *control, st *lag.State) {
	tc.parts = make(map[int32]partTrack, len(st.Partitions))
	for _, ps := range st.Partitions {
		tc.parts[ps.Partition] = trackPart(partTrack{}, false, &ps, st, 0)
	}
	tc.partsAt = st.At
}

// reading is what one fresh observation tells the controller: the figures
// every rule decides from. Times are in seconds, rates in msg/s.
type reading struct {
	dt   float64 // this observation interval
	span float64 // the time the consumption was measured over (>= dt)
	// cadence is the commit cadence worked with (see cadence), 0 when
	// the position moves whenever the consumer consumes.
	cadence float64
	// commits: the position is a commit of a consumer that commits less
	// often than it is observed, or whose cadence is not learned yet
	// (v.cadence > 0, Source commits).
	commits bool
	// learned: the cadence is the one lag/ learned (State.CommitInterval),
	// not assumed (see cadence).
	learned   bool
	since     float64 // how long ago it committed the position seen (0: exact enough)
	headAge   float64 // the head's age at the commit (HeadAge - since), of the partitions not avoided
	headKnown bool    // State.HeadAgeKnown
	// queued: the wait less the standing wait the target shows when
	// healthy (see judge), seconds.
	queued     float64
	budget     float64 // L: MaxAge - ProcessingTime
	setWait    float64 // W*: the standing wait steered to under overload
	engageWait float64 // E: the wait above which the consumer is saturated
	consumed   float64 // the consume rate measured (see consumption)
	produced   float64 // the produce rate of the interval
	prevCap    float64 // the capacity estimate before this observation
	capacity   float64 // C: the capacity estimate
	lag        float64 // messages, as observed
	backlog    float64 // B: the lag minus the commit slack, messages
	setBacklog float64 // B* = W*·C
	wait       float64 // W = B / C; +Inf with a backlog and nothing consumed
	// rawWait is the wait before the standing wait (tc.floor) is taken
	// out of the backlog; unlearned: the position is read from commits
	// whose cadence is not learned yet.
	rawWait   float64
	unlearned bool
	// measured: the interval measured the consumption; false while a
	// consumer that commits less often than it is observed has not
	// committed yet (its capacity is then unknown, not 0).
	measured bool
	// keepsUp: measured, and the consumer consumed at least keepUpRatio
	// of what was produced since its position last moved, or has no
	// backlog.
	keepsUp bool
	// spare: the producers are refused (binding) while the consumer
	// keeps up at well below the rate it showed before (the ceiling),
	// or, limited, it keeps up and is caught up at every commit (see
	// caughtAtCommits): it has capacity to spare, whatever standing lag
	// it shows.
	spare   bool
	engaged bool // W > E and no spare capacity: the consumer is saturated
	// standing and allowance are the standing wait (tc.floor) and the
	// startup allowance (unlearnedWait) the engage test took off the
	// wait, seconds, as they were then (unlimitedReason).
	standing, allowance float64
	stepDown            bool    // capacity fell during the interval: pause
	stillHead           bool    // paused, and nothing consumed since: pause again (stillAfterPause)
	law                 float64 // the saturated law's rate (0 while draining dead work)
	probe               float64 // the multiplicative step of a probe
	// wasSaturated: the last measured observation found the consumer
	// saturated.
	wasSaturated bool
	// binding: the target was limited and the producers used the whole
	// rate in force (at least bindRatio of it) during the interval.
	binding bool
	// avoid lists the partitions producers avoid (fewBad: they are few
	// enough to write around); lateLag is their lag, which the target's
	// backlog leaves out: producers that write around them add nothing
	// to it, so the wait of a new message is the other partitions'.
	// The rates leave them out too (see leaveOutLate).
	avoid   []int32
	fewBad  bool
	lateLag float64
	// lateOut: what leaveOutLate took out of v.consumed, msg/s (the
	// avoided partitions' drain, less their counted skips).
	lateOut float64
	// shares: the keyless shares of the avoided partitions that have a
	// rate (see keylessShares).
	shares []PartitionShare
	// spanProduced: messages produced over the span the consumption was
	// measured over (see consumption); prevProduced: the produce rate
	// over the move before, msg/s (0: unknown), for positions read from
	// commits as often as observations.
	spanProduced, prevProduced float64
	// keptTwo: over this move and the one before (which span at least
	// two commits), the consumer consumed keepUpRatio of what was
	// produced (a position read from commits as often as observations).
	keptTwo bool
	// twoRate: what the consumer consumed over this move and the one
	// before (a position read from commits at a learned cadence), or
	// over its last two commit spans (a position estimated between
	// commits), msg/s; 0: not read so (see pollBurst).
	twoRate float64
	// lower: the consumption measured is a lower bound of the
	// consumer's rate (the first commit after first sight, see
	// consumption); sightCommit: that commit measures nothing, and its
	// lag is the backlog (not extrapolated from the reading before).
	lower, sightCommit bool
	// noQueue: measured, and the head at the commit shows no queue
	// beyond the standing wait (see noQueueAtCommit); caught: measured,
	// and every commit shows the consumer caught up (see
	// caughtAtCommits).
	noQueue, caught bool
	// trial: a probe is let through to tell a standing wait from a
	// queue (see trialUnderCut).
	trial bool
	// headRose: the head at the commit is more than E/4 older than at
	// the last measured reading (see risenHead).
	headRose bool
	// relearn: that probe is relearnStanding's (RuleRelearn);
	// phaseMoved: within floorMemory a consumer that commits about once
	// per observation was seen not to commit in one (tc.skipAt).
	relearn, phaseMoved bool
	// at: the State.At of the reading.
	at time.Time
	// blind: the position is an estimate between the commits of a
	// consumer that was caught up at its last commit (see
	// caughtUpAtCommit).
	blind bool
	// estimated: the position is lag/'s estimate between the commits
	// of a consumer that commits less often than it is observed;
	// capped: a probe is capped at tc.capCap however the estimate
	// reads (see blindStep).
	estimated, capped bool
	// own, ownSpan, ownProduced: this move's own consume rate (msg/s),
	// span (s) and messages produced over it, before twoMoves averages
	// it with the move before; startLag: the lag at the move before.
	// fall: the move shows the capacity fell (see Controller.fell);
	// fallWait: the wait the backlog adds by the next decision at the
	// rate consumed, (P - C)/C of the interval, seconds (0 unless fall).
	own, ownSpan, ownProduced, startLag float64
	// ownBefore, prodBefore: tc's before this move.
	ownBefore, prodBefore [2]float64
	fall                  bool
	fallWait              float64
	// spanMeasured: a commit that corrected the estimate measured the
	// consumption from the commit before it (see correctedSpan).
	spanMeasured bool
	// overdue: no commit since the poll in hand began, for longer than
	// that poll takes at the capacity estimate overdueFrom; v.capacity is
	// the most the consumer consumes (pollOverdue).
	overdue     bool
	overdueFrom float64
	// shadow: the reading is in the shadow of a stall the observer
	// shared (see observerStall); held: it read a stall of the whole
	// consumer there, which is not believed yet.
	shadow, held bool
	// rise: every partition not listed showed its head rise together
	// while some are listed (see sharedRise): a stall of the whole
	// consumer, the topic's law's evidence and no partition's.
	rise bool
	// raised: a probe raised the rate in force (see plan).
	raised bool
}

func secs(s float64) string {
	if unbounded(s) {
		return "unbounded"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

// unbounded reports whether a wait of s seconds is infinite, not a
// number, or beyond what a Duration holds.
func unbounded(s float64) bool {
	return math.IsNaN(s) || s >= float64(math.MaxInt64)/float64(time.Second)
}

// waitDuration is a wait in seconds as a Decision's Wait: lag.Never when
// it is unbounded, not a number, or beyond what a Duration holds (a
// backlog over a capacity estimate near 0: converted as it was, the wait
// read -2562047h47m16.854775808s in a hard-age reason of the demo).
func waitDuration(s float64) time.Duration {
	if unbounded(s) {
		return lag.Never
	}
	return time.Duration(s * float64(time.Second))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// StandIn says whether the decisions are served by a replica standing in
// for a silent leader (a follower serving its own leases while the
// leader's are not renewed): producers may still hold the leader's
// leases, or another replica's, and leave this controller's rate unused
// for that. While on, a limited target that is caught up with its rate
// unused keeps the rate in force (RuleProbe, saying so) instead of
// probing it up and releasing it; everything else, cuts included, is
// decided as usual. Off by default. Not safe for concurrent use, like
// Step.
func (c *Controller) StandIn(on bool) { c.standIn = on }

// Adopt makes another replica's decision d the rate in force of its
// target, for a controller that steps the same target without its
// decisions being obeyed (a follower: producers obey the leader's leases).
// A limited d (a finite Rate) leaves the target limited at d.Rate; an
// unlimited one leaves it not limited. A d admitting nothing (Rate 0: a
// pause on a step down, a stop) is what the leader holds for an
// observation, not a rate to go on from: the rate in force becomes
// d.Capacity, the consume rate it worked with (a caught-up target limited
// at 0 is released). A release then takes ReleaseAfter more observations
// of the rate unused than usual: the producers were given the other
// replica's leases, not this controller's rate, and take some
// observations to use a rate they are given on a takeover; meanwhile a
// rate left unused is kept, not probed up (it would compound, unused, to
// several times the capacity, and the producers would use it all at
// once). The next Step
// goes on from there with this controller's own measurements, so that a
// follower that takes over continues the leader's regime (probing from its
// rate, following, releasing) instead of its own, which had diverged.
// Nothing is done for a target without a record (one this controller
// never stepped, or forgot). Not safe for concurrent use, like Step.
func (c *Controller) Adopt(d Decision) {
	tc := c.targets[d.Target]
	if tc == nil {
		return
	}
	tc.release = -c.cfg.ReleaseAfter
	tc.limited = !d.IsUnlimited() && !math.IsNaN(d.Rate) && d.Rate >= 0
	if !tc.limited {
		// A release the leader decided between two of this follower's
		// readings ends the episode restoredProbe reads (satCap), and
		// its re-open cap (reopenCap).
		tc.satCap, tc.restored, tc.reopen = 0, false, reopened{}
		tc.satNew, tc.satSeen = 0, 0
	}
	if tc.limited {
		// The rate of the partitions not avoided (see withShares).
		tc.rate = d.Rate * (1 - min(sumShares(d.PartitionShares), 0.5))
		if tc.rate <= 0 && d.Capacity > 0 && !math.IsInf(d.Capacity, 1) {
			tc.rate = d.Capacity
		}
	}
}

// onceObs reports whether v reads a consumer that commits about once per
// observation (a cadence of more than half an interval, at most one and a
// half).
func onceObs(v *reading) bool { return v.cadence > v.dt/2 && v.cadence <= 1.5*v.dt }

// queuedReading reports whether v shows work queued: lag, the head older
// than E/2 (or unknown).
func queuedReading(v *reading) bool {
	return v.lag > 0 && (!v.headKnown || v.headAge > v.engageWait/2)
}
