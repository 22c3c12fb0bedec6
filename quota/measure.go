package quota

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// measure reads st into v and updates the smoothed interval and capacity
// of tc.
func (c *Controller) measure(tc *control, st *lag.State, p *Policy, v *reading) {
	cfg := &c.cfg
	v.budget, v.produced, v.lag, v.at = p.Budget().Seconds(), st.ProduceRateInstant, float64(st.Lag), st.At
	v.binding = tc.limited && v.produced >= bindRatio*tc.rate
	// The observation interval, as measured, and its smoothed value, the
	// delay of the feedback loop.
	v.dt = cfg.Interval.Seconds()
	if tc.has {
		v.dt = st.At.Sub(tc.lastAt).Seconds()
	}
	v.shadow = c.observerStall(tc, st, v)
	if tc.interval <= 0 {
		tc.interval = v.dt
	} else {
		tc.interval += 0.25 * (v.dt - tc.interval)
	}
	// The standing wait steered to under overload: Setpoint of the budget,
	// but no more than one loop delay. A backlog of one interval of work
	// is what keeps the consumer busy (its capacity visible) until the
	// next decision takes effect; more only waits, and is what a sudden
	// capacity drop turns into dead messages. Engage keeps its ratio to
	// the setpoint.
	v.setWait, v.engageWait = cfg.waits(v.budget, tc.interval)

	v.prevCap, v.wasSaturated = tc.capacity, tc.saturated
	v.cadence = cadence(tc, st)
	c.consumption(tc, st, v)
	c.caughtUpAtCommit(tc, st, v)
	v.learned = st.CommitInterval > 0
	v.commits = fromCommits(st) && (v.learned || (v.cadence > 0 && tc.still))
	commitPhase(tc, st, v)
	switch {
	case v.commits:
		v.since = commitAge(tc, st, v)
	case idleReported(st):
		// The consumer said it had nothing in hand, up to a reporter's
		// period ago: what was written since is lag it has not been
		// asked about yet, not work waiting for it. Read it as a commit
		// that old. (A report with work in hand is taken as it is: how
		// far the consumer got through what it holds is unknown.)
		v.since = st.Uncertainty.Seconds()
	}
	v.headAge, v.headKnown = max(st.HeadAge.Seconds()-v.since, 0), st.HeadAgeKnown
	sight := idleSince(tc, st)
	v.avoid, v.fewBad = c.lateParts(tc, st, p, v)
	// A share is of what the producers send next: over the larger of the
	// interval's produce rate and the smoothed one, so that an interval
	// they sent little in (a stall of the machine, a reading that came
	// early) does not hand a listed partition its whole share
	// (TestControllerKeylessShareRate).
	v.shares = keylessShares(tc, v.avoid, max(v.produced, produceRate(*st)), len(st.Partitions))
	leaveOutLate(tc, v)
	if len(v.avoid) > 0 {
		v.headAge = max(othersHead(st, v.avoid)-v.since, 0)
	}
	v.capacity = readCapacity(tc)
	if v.measured {
		c.measured(tc, st, p, v, sight)
	}
	endHold(tc, st, v)
	c.pollOverdue(tc, st, v)
	tc.othersLag = v.lag
	backlog(tc, v, st.At)
	v.rawWait = waitOf(v)
	beyondStanding(tc, v)
	v.wait = waitOf(v)
	v.unlearned = fromCommits(st) && !v.learned && v.cadence > 0
	noteShown(tc, v)
	if v.measured {
		tc.measuredSeen++
		if v.learned {
			tc.learnedSeen++
		}
	}
	c.judge(tc, v)
	v.stillHead = stillAfterPause(tc, st, v)
	c.saturatedLaw(tc, st, v)
}

// stillAfterPause reports whether a target paused on a step down (see
// saturatedLaw) shows, at the next observation, that its consumer still
// consumes next to nothing: read from commits (or estimated between them,
// lag.SourceEstimate) at a learned cadence, no commit since the pause, the
// last one overdue as overdue has it (1.5 commit intervals and one
// observation ago: a poll in hand longer than any before the drop; at
// 1.5 intervals alone, a cadence learned as 250 ms for commits every
// 0.5 s at 10x held a lumpy pause 376 ms after a commit), and the head
// aged by at least stillAged of the time since the pause (the position
// moved over less than a quarter of what was written in that time). The pause is a measure for one
// interval, and the observation after it measures nothing: a consumer
// that commits every poll holds the poll it had at the drop, lag/'s
// estimate between commits stops at what the last commit explains, and
// the capacity estimate stays at the rate from before the drop. Commit
// per poll and the ttl guard at 10x, read every 250 ms, were re-opened
// at 1,497, 1,224 and 978 msg/s (at "capacity 1,972/s") and 1,407 and
// 1,130 msg/s (1,829/s) for a consumer down to 400/s, their heads aging
// 0.27-0.30 s an observation (lagbridge bench on kfake, session 23;
// TestControllerStillAfterPause). A lumpy reading that fired the step
// down (a consumer keeping up that committed less in one interval)
// shows its head moving at the next observation (0.04-0.05 s aged), or
// a commit, and goes on as before.
func stillAfterPause(tc *control, st *lag.State, v *reading) bool {
	if !tc.paused || !st.HeadAgeKnown || st.Lag <= 0 || st.CommitInterval <= 0 ||
		(st.Source != lag.SourceCommits && st.Source != lag.SourceEstimate) {
		return false
	}
	since := st.At.Sub(tc.pauseAt).Seconds()
	last := lastMove(st)
	return since > 0 && !last.After(tc.pauseAt) &&
		st.At.Sub(last).Seconds() > 1.5*st.CommitInterval.Seconds()+v.dt &&
		st.HeadAge.Seconds()-tc.pauseHead >= stillAged*since
}

// keptPause is the rule of a reading that keeps a pause (see
// stillAfterPause): the step down, at 0/s, until the head is past the
// budget; from there on the drain, which says what holds: a consumer
// that consumes nothing while its head ages past the budget (a hung
// member: alive, never committing) is no capacity still to measure. Kept
// so, a hung member read "capacity still not measured" under the step
// down up to the hard age (review-tenx, session 24; the wait stayed
// below the budget, the producers held at 0/s adding no lag). Either
// keeps the pause (Step): the drain of a kept pause re-opens at no stale
// capacity. Only the rule and reason differ: tc.drained stays as the
// step down leaves it (set, the next commit's probe cap read the pause
// as a drain: a behaviour of its own, not measured).
func keptPause(st *lag.State, v *reading) (Rule, string) {
	head, since := st.HeadAge.Seconds(), st.At.Sub(lastMove(st)).Round(time.Millisecond)
	if head > v.budget {
		return RuleDrain, fmt.Sprintf("paused on a step down, and nothing committed since (no commit for %s, commit interval %s): head %s > budget %s, draining",
			since, st.CommitInterval.Round(time.Millisecond), secs(head), secs(v.budget))
	}
	return RuleStepDown, fmt.Sprintf("paused on a step down, and nothing committed since (head %s, no commit for %s, commit interval %s): capacity still not measured, admitting nothing (wait %s)",
		secs(head), since, st.CommitInterval.Round(time.Millisecond), secs(v.wait))
}

// endHold reads the commit that ends a pause kept by stillAfterPause (the
// first since the pause): what the consumer committed from its last
// commit before the pause to this one, over the time between them, is
// the capacity when it is below the estimate (counted over the partitions
// with a commit, not stale, in both readings, each at least 0; nothing
// taken when none moved: a partition gone stale or reset is not a
// capacity of 0). At a drop that span holds the poll in hand, partly
// worked through at the old capacity, so it overstates the new one. It
// understates a consumer that stalled after the step down and commits
// its first moments back: replayed, commit per poll at 2,000/s blocked
// 2 s then committing 300 records read 195/s and drained, where main kept
// 2,945/s (review-tenx, session 24); the next readings measure it again
// and the probe climbs back (x1.5 a decision). Taken by the estimate
// (read through a position estimated between commits, such a commit
// measures nothing, see commitSpan), commit per poll at 10x re-opened at
// "capacity 2,037/s", 1,526 msg/s, on the commit that came 1.5 s after
// the pause for a consumer of 400, and was drained one reading later
// (lagbridge bench on kfake, session 24). Only after a pause that was
// kept, whatever its last reading's rule (step-down, keptPause's drain on
// the head, or a drain on the wait): skipped after a drain on the wait,
// the commit re-opened at 978/s on the 1,972/s from before the drop
// (review-keptpause, session 25; the simulator's 1 s auto-commit grid
// moves by a second of 162 refused while idle).
func endHold(tc *control, st *lag.State, v *reading) {
	if !tc.stillHeld {
		return
	}
	last := lastMove(st)
	if !last.After(tc.pauseMove) {
		return
	}
	tc.stillHeld = false
	span := last.Sub(tc.pauseMove).Seconds()
	if span <= 0 || tc.pauseMove.IsZero() {
		return
	}
	var moved int64
	var counted bool
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if !withCommit(ps) {
			continue
		}
		j, found := slices.BinarySearchFunc(tc.pauseCommits, ps.Partition, func(c partCommit, p int32) int { return cmp.Compare(c.partition, p) })
		if found {
			moved += max(ps.Committed-tc.pauseCommits[j].committed, 0)
			counted = true
		}
	}
	if r := float64(moved) / span; counted && r > 0 && r < v.capacity {
		tc.capacity, v.capacity = r, r
	}
}

// partCommit is a partition's committed offset (see endHold).
type partCommit struct {
	partition int32
	committed int64
}

// appendCommits appends st's committed offsets, on the partitions with a
// commit that are not stale, to dst in partition order.
func appendCommits(dst []partCommit, st *lag.State) []partCommit {
	from := len(dst)
	for i := range st.Partitions {
		if ps := &st.Partitions[i]; withCommit(ps) {
			dst = append(dst, partCommit{ps.Partition, ps.Committed})
		}
	}
	slices.SortFunc(dst[from:], func(a, b partCommit) int { return cmp.Compare(a.partition, b.partition) })
	return dst
}

// withCommit says whether ps has a committed offset to count: it has a
// commit and is not stale.
func withCommit(ps *lag.PartitionState) bool { return ps.Committed >= 0 && !ps.Stale }

// committedPos is the sum of st's committed offsets, on the partitions
// with a commit that are not stale.
func committedPos(st *lag.State) int64 {
	var pos int64
	for i := range st.Partitions {
		if ps := &st.Partitions[i]; withCommit(ps) {
			pos += ps.Committed
		}
	}
	return pos
}

// noteShown keeps tc.shown, the highest consume rate measured while
// limited (see unlearnedStale): forgotten while unlimited, and restarted
// from v's at a head older than any standing wait explains (floorCap and
// E/2): a queue, the consumer at its capacity now, whatever it consumed
// before (a capacity drop).
func noteShown(tc *control, v *reading) {
	switch {
	case !tc.limited:
		tc.shown = 0
	case v.measured && v.headKnown && v.headAge > floorCap(v)+v.engageWait/2:
		tc.shown = v.consumed
	case v.measured:
		tc.shown = max(tc.shown, v.consumed)
	}
}

// commitPhase records a reading in which a consumer that commits about
// once per observation had not committed (tc.skipAt: its commit timer's
// phase crossed the observations') and sets v.phaseMoved when that was
// within floorMemory (see staleStanding). A reading in the shadow of the
// observer's own stall (v.shadow) is not one: the machine, not the
// consumer's timer, held that commit back, and any consumer that commits
// once per observation or more often (NATS acks too: lag/ rounds the
// cadence to the interval) would have read as one whose phase matters
// for floorMemory after it.
func commitPhase(tc *control, st *lag.State, v *reading) {
	if !v.measured && !v.shadow && v.commits && v.learned && onceObs(v) && st.Lag > 0 {
		tc.skipAt = st.At
	}
	v.phaseMoved = !tc.skipAt.IsZero() && st.At.Sub(tc.skipAt).Seconds() <= floorMemory
}

// beyondStanding takes the standing wait a consumer read through its
// commits shows while healthy (tc.floor: uncommitted work, messages in
// flight) out of v.backlog: it is no work waiting, and the law steers the
// backlog beyond it. It is work consumed at the rate produced while the
// head shows no queue beyond it (the consumer was caught up at its
// commit), else at most at the capacity.
func beyondStanding(tc *control, v *reading) {
	if !v.commits || tc.floor <= 0 || v.capacity <= 0 {
		return
	}
	rate := min(v.capacity, v.produced)
	if v.headKnown && v.headAge+v.since <= tc.floor+v.engageWait/2 {
		rate = v.produced
	}
	v.backlog = max(v.backlog-tc.floor*rate, 0)
}

// measured completes v for a reading that measured the consumption
// (sight: see idleSince): whether every commit shows the consumer caught
// up, whether the head shows no queue, a trial probe (trialUnderCut) and
// the capacity estimate.
func (c *Controller) measured(tc *control, st *lag.State, p *Policy, v *reading, sight float64) {
	if v.fall = c.fell(tc, st, v); v.fall {
		v.consumed, v.span, v.spanProduced, v.keepsUp, v.keptTwo = v.own, v.ownSpan, v.ownProduced, false, false
	}
	v.caught = !v.fall && caughtAtCommits(st, v)
	v.noQueue = !v.fall && (noQueueAtCommit(tc, st, v) || v.caught || idleBefore(tc, st, v) || idleAtReport(st, v) || idleAtSight(v, sight))
	c.trialUnderCut(tc, v)
	c.estimateCapacity(tc, st, p, v)
}

// keepsUpAtCommits reports whether a consumer read through its commits,
// that did not consume 95% of what was produced in the interval, keeps up
// all the same, once its standing wait is learned: a reading of commits
// holds a commit's worth more or less than was consumed, so with the
// backlog beyond the standing wait near empty (under E/2) it is no
// evidence of falling behind; and a consumer whose commits run one
// observation behind (a standing wait of half an interval or more)
// consumes in one interval what was produced in the one before, which
// reads as falling behind whenever the rate rises (a probe).
func (c *Controller) keepsUpAtCommits(tc *control, v *reading) bool {
	if !v.commits || tc.floorSeen < floorLearn {
		return false
	}
	return v.wait <= v.engageWait/2 || (tc.floor >= v.dt/2 && v.prevProduced > 0 && v.consumed >= keepUpRatio*v.prevProduced)
}

// caughtAtCommits reports whether st reads the commits of a consumer (a
// learned cadence, every partition with lag read at its commit) that was
// caught up at each of them: on every partition not avoided that has lag,
// the record at the committed position had waited at most E when the
// commit was made, however the commit is dated (lag/ dates it half an
// interval before the reading that saw it; it may have been made up to
// half an interval later), and the head is at most a commit interval, an
// observation interval and E/2 old (a partition that stopped on a record
// written after its last commit ages past that). Its lag is then what was
// written since its commits, not work waiting: the standing wait its commit
// cadence creates, which no quota removes, and the consume rate read is the
// commits' timing, not the capacity. Read as a queue, such readings limited
// a consumer of 12,000 msg/s at the 60 msg/s of its first reading and held
// it there (lagbridge bench --hot-partition at 250 ms, kfake;
// TestControllerCaughtAtCommitsReleases, TestSimCaughtUpNotHeld). A
// consumer held at its setpoint shows a record that waited about the
// setpoint (more than E) at each commit. When half an observation interval
// is the engage wait or more (at 1 s, E is 0.4 s), the dating cannot tell
// a queue of E from none: false (at 1 s, TestUnlistedFloodDoesNotStarveListed
// of internal/engine saw a slowdown one interval late).
func caughtAtCommits(st *lag.State, v *reading) bool {
	if !fromCommits(st) || !v.learned || v.cadence <= 0 || v.dt/2 >= v.engageWait {
		return false
	}
	found := false
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag <= 0 || slices.Contains(v.avoid, ps.Partition) {
			continue
		}
		if !ps.HeadKnown || ps.LastCommit.IsZero() || ps.Stale || !(ps.Source == "" || ps.Source == lag.SourceCommits) {
			return false
		}
		head, since := ps.HeadAge.Seconds(), st.At.Sub(ps.LastCommit).Seconds()
		if head-since+v.dt/2 > v.engageWait || head > partCadence(ps, v)+v.dt+v.engageWait/2 {
			return false
		}
		found = true
	}
	return found
}

// behindWait is the standing wait of a consumer whose commits run most of
// an observation behind (tc.floor, when it is over twice the engage wait:
// a 1 s auto-commit read every second shows 0.9-1.0 s), else 0, seconds: a
// head that old shows no queue. A smaller standing wait is within what
// the engage wait allows already, and taking it in would see a capacity
// drop one engage wait later (TestSimCommitCadence: a 250 ms auto-commit
// read every 250 ms let in 300 messages after the drop, bound 200).
func behindWait(tc *control, v *reading) float64 {
	if tc.floor > 2*v.engageWait {
		return tc.floor
	}
	return 0
}

// trialUnderCut tells the standing wait of a commit cadence from a
// queue for a limited target that has not learned its standing wait
// (tc.floor) because it was limited before it could: after floorLearn
// readings in a row that may show either (standingUnderCut), the next
// such reading lets a probe through (v.trial: capacity to spare), and
// the reading after it tells. A consumer at its limit queues the probe's
// surplus: its head at the commit grows (by about half an interval at
// the x1.5 step). A consumer that commits once per observation and has
// capacity to spare consumes it: its head stays where it was (within E/4)
// with no more lag than was produced since it (and E/2), and that head is
// learned as its standing wait, as healthy readings learn it while the
// target is unlimited. Without it, such a target read its uncommitted
// second of work as a queue at every reading, the consumption it showed
// (all it was allowed) as its capacity, and the law cut the rate below
// it each time, the consumer idle: 2,000 msg/s held at 27-51 msg/s for a
// whole lagbridge bench run (kafka/autocommit-1s/sync/1s at 2x, kfake,
// after a drain at its first fresh reading), and from 1,500 to 104 msg/s
// over 40 s in the simulator (TestSimFalseDrainNotLocked). The readings
// alone cannot tell: at a 1 s interval a consumer at its limit read
// through commits every 100 ms, its estimate high after a drop, or on a
// slow ramp down, reads the same (TestSimRestoreProbesFromConsumed,
// TestSimSlowRamp learned a second of standing wait and let the head
// reach 3.1 s).
func (c *Controller) trialUnderCut(tc *control, v *reading) {
	if !v.measured {
		return
	}
	if tc.trialHead > 0 && tc.limited && v.headKnown && v.headAge > v.engageWait && v.headAge <= tc.trialHead+v.engageWait/4 &&
		v.lag <= (v.headAge+v.engageWait/2)*v.produced {
		raiseFloor(tc, v, v.headAge)
	}
	tc.trialHead = 0
	switch {
	case !c.standingUnderCut(tc, v):
		tc.underCut = 0
	case tc.underCut+1 >= floorLearn:
		v.trial, tc.trialHead, tc.underCut = true, v.headAge, 0
	default:
		tc.underCut++
	}
	relearnStanding(tc, v, c.probeStep(v))
	v.headRose = v.headKnown && tc.prevHead >= 0 && v.headAge > tc.prevHead+v.engageWait/4
	tc.prevHead = -1
	if v.headKnown {
		tc.prevHead = v.headAge
	}
}

// standingUnderCut reports whether v may show a limited target's wait
// to be the standing wait of its commit cadence (see trialUnderCut): the
// target has not learned its standing wait, the last measured reading
// found it saturated and the law has the rate in force below the
// capacity estimate (by more than twice the keep-up tolerance), the
// producers used it, and the consumer, read through the commits it makes
// about once per observation, consumed what was produced over this
// interval or the one before (within 1-keepUpRatio: its commits may run
// one observation behind), while the head at its commit, over the engage
// wait, stayed where it was (within E/4) and no older than its cadence
// allows (floorCap and E/2). A queue at a consumer at its limit mostly
// drains under such a cut: the consumer consumes at its capacity, more
// than was admitted, and the head falls.
func (c *Controller) standingUnderCut(tc *control, v *reading) bool {
	if tc.floorSeen >= floorLearn || !tc.limited || !tc.saturated || tc.rate >= (1-2*(1-keepUpRatio))*v.prevCap {
		return false
	}
	return cadenceHeld(tc, v) && consumedProduced(v) && v.headAge > v.engageWait
}

// cadenceHeld reports whether v reads a consumer that commits about once
// per observation, through those commits, while the producers use the
// rate in force (v.binding), with its head at the commit held where it was
// (within E/4) and no older than its cadence allows (floorCap and E/2):
// what both a standing wait of its commit cadence and a queue the law
// holds at its setpoint show (see standingUnderCut, staleStanding).
func cadenceHeld(tc *control, v *reading) bool {
	return v.measured && v.commits && v.learned && v.headKnown && tc.prevHead >= 0 && v.binding &&
		onceObs(v) &&
		v.headAge <= floorCap(v)+v.engageWait/2 && math.Abs(v.headAge-tc.prevHead) <= v.engageWait/4
}

// consumedProduced reports whether the consumer consumed what was
// produced over this interval or the one before (within 1-keepUpRatio:
// its commits may run one observation behind).
func consumedProduced(v *reading) bool {
	near := func(a, b float64) bool { return b > 0 && math.Abs(a-b) <= (1-keepUpRatio)*b }
	return near(v.consumed, v.produced) || near(v.consumed, v.prevProduced)
}

// relearnStanding is trialUnderCut for a standing wait learned while
// healthy (tc.floor) that the commits no longer fit. A consumer that
// commits about once per observation on a timer that drifts (Java's and
// franz-go's auto-commit) shows anything from none to a whole commit of
// uncommitted work, as its timer's phase against the observations moves,
// and the standing wait is learned only while the target is unlimited.
// Limited across a capacity drop and its restore, the phase moved (0.4 s
// learned, 0.8-0.9 s shown): the law read the difference as its
// setpoint's queue and held the rate at what the idle consumer was
// allowed for the rest of the run (the simulator, 1 s auto-commit read
// every second at 2x: 13 of 40 runs refused 1.1-13 s while the consumer
// idled; lagbridge bench on a loaded machine: 108-463 msg/s held for an
// 800 msg/s offer). No reading tells that standing wait from a queue the
// law holds at its setpoint, so after floorLearn readings in a row that
// may show either (staleStanding) one probe is let through (v.trial,
// RuleRelearn) and the next measured readings tell: a consumer with
// capacity to spare consumed what the probe admitted (in that reading,
// or over it and the next: its commits may run one observation behind)
// while its head at the commit grew no more than E/4, and the head the
// trial was let through at (or the telling one, if older) is learned as
// its standing wait; a consumer at its limit queued
// the surplus (its head grows, or it consumed less than was produced),
// and the law drains it. Only a trial that went through (the decision's
// rule is RuleRelearn) is told: a reading in which another rule decided
// (the consumer seen not to keep up) admitted nothing more, and learning
// from it relearned the standing wait with no probe and no decision to
// show it (Step cancels it; the next qualifying reading tries).
//
// The head learned is the trial's, the one held for floorLearn readings:
// the telling reading's is as often the head of a commit the drifting
// timer moved just before the observation (0.02-0.04 s), and learning
// only that left the standing wait where it was, so the law read the
// next 0.8-0.9 s head as its setpoint's queue again, with the one trial
// of the episode spent (TestSimOneSecondGrid at 5x, seed 7 with the
// first commit at 0.8 s: refused 13 s while the consumer idled after
// the restore, `saturated` at 150-1,229 msg/s of a 2,000 offer). What
// that risks, a consumer at its limit whose trial the cut after it
// hid, is held by risenHead.
func relearnStanding(tc *control, v *reading, step float64) {
	if !tc.limited {
		tc.staleSpent = false
	}
	if tc.staleHead > 0 && v.at.After(tc.staleBy) {
		// Not told in time (no commit came, or none measured): what a
		// later reading shows is no longer the probe's doing.
		tc.staleHead, tc.staleSeen, tc.staleTell = 0, 0, 0
	}
	if tc.staleHead > 0 {
		tc.staleTell++
		held := tc.limited && v.headKnown && v.headAge <= tc.staleHead+v.engageWait/4 && v.lag <= (v.headAge+v.engageWait/2)*v.produced
		switch {
		case held && (v.consumed >= keepUpRatio*v.produced || tc.staleTell >= 2 && v.keptTwo):
			raiseFloor(tc, v, max(v.headAge, tc.staleHead))
		case held && tc.staleTell < 2:
			return
		default:
			tc.staleSpent = tc.staleSpent || !phaseShown(tc, v) || unlearnedFloor(tc)
		}
		tc.staleHead, tc.staleSeen, tc.staleTell = 0, 0, 0
		return
	}
	switch {
	case v.trial || !staleStanding(tc, v, step):
		tc.staleSeen = 0
	case tc.staleSeen+1 >= floorLearn:
		v.trial, v.relearn, tc.staleHead, tc.staleSeen, tc.staleBy = true, true, v.headAge, 0, staleDue(tc, v)
	default:
		tc.staleSeen++
	}
}

// staleDue returns when the verdict of a relearn trial let through at
// reading v is due: the two readings after it (relearnStanding tells at
// the first or the second), with a commit that may come half a cadence
// late (lag/'s overdue bound) between, from the interval and cadence of
// the trial's reading. A trial without a verdict by then (readings that
// measured nothing, a consumer that stopped committing, observations that
// failed for a while) told nothing, and a head read later is not the
// probe's: before, the pending trial was told by whichever measured
// reading came next, however late. The due time is fixed at the trial: a
// bound from the reading that tells grew with the gap it came after.
func staleDue(tc *control, v *reading) time.Time {
	due := 2*max(tc.interval, v.dt) + 1.5*max(v.cadence, v.dt)
	return v.at.Add(time.Duration(due * float64(time.Second)))
}

// staleStanding reports whether v may show a limited target's wait to be
// a standing wait of its commit cadence that the one learned (tc.floor)
// no longer fits (see relearnStanding): the producers use the rate in
// force, and the consumer, read through the commits it makes about once
// per observation, consumed what was produced (over this interval or the
// one before, within 1-keepUpRatio, or over two moves), while its head at
// the commit, past the learned standing wait by more than E/2 and no
// older than its cadence allows (floorCap and E/2), stayed where it was
// (within E/4). Only for a consumer whose commit timer's phase is seen
// to matter: the standing wait learned is over E/2 (more than messages
// in flight and commits several times per observation leave), or within
// floorMemory it was seen not to commit in an observation (v.phaseMoved).
// Consumers that commit as they consume, held at their setpoint, read
// the same, and a trial every few readings broke their steady overload
// (TestSimSlowRamp). A target with no standing wait learned
// (unlearnedFloor) is tried only as unlearnedStale allows, once until it
// is unlimited again.
func staleStanding(tc *control, v *reading, step float64) bool {
	if !tc.limited || !phaseShown(tc, v) && tc.staleSpent || unlearnedFloor(tc) && !unlearnedStale(tc, v, step) {
		return false
	}
	return cadenceHeld(tc, v) && (consumedProduced(v) || v.keptTwo) && v.headAge > tc.floor+v.engageWait/2
}

// unlearnedFloor reports whether tc has no standing wait: not learned
// while healthy (floorLearn readings) nor by a trial. What fewer healthy
// readings showed is a lower bound on it, not a learned one: a consumer
// limited after one or two healthy readings and held at its capacity is
// still tried only as unlearnedStale allows (TestUnlearnedFloorPartial).
func unlearnedFloor(tc *control) bool { return tc.floorSeen < floorLearn && !tc.floorTold }

// unlearnedStale reports whether a limited target that has no standing
// wait (unlearnedFloor) may have its wait tried as one (see
// staleStanding): no trial failed since it was last unlimited, and the
// consumer once consumed more than the probe would admit (the capacity
// estimate before this reading, one probe step up). A consumer that
// commits about once per observation shows half a commit of uncommitted
// work on average, about the law's setpoint at a 1 s interval, so a
// target limited before its standing wait was learned read that as the
// queue the law holds, and the consumption it was allowed as its
// capacity, however fast the consumer: a first fresh reading inside a
// machine stall drained the target and learned 103-181 msg/s, held at
// 150-250 msg/s for the rest of the run with a consumer of 2,000 that
// had consumed 864 msg/s in that stall (lagbridge bench
// kafka/autocommit-1s/sync/1s at 2x on Kafka 4.3.1, load 14;
// TestControllerStallStartRelearns). A consumer held at its setpoint at
// its capacity from the start shows the same readings but no higher
// rate: no trial (TestSimHardAgeStop). One that had shown more and lost
// it (a capacity drop) queues the trial's surplus, and gets no other
// until it is unlimited again.
func unlearnedStale(tc *control, v *reading, step float64) bool {
	return !tc.staleSpent && v.prevCap > 0 && tc.shown >= (1+step)*v.prevCap
}

// phaseShown reports whether a consumer's commit phase is seen to matter
// (see staleStanding): its learned standing wait is over E/2, or within
// floorMemory it was seen not to commit in an observation.
func phaseShown(tc *control, v *reading) bool { return v.phaseMoved || tc.floor > v.engageWait/2 }

// unlearnedWait is the standing wait, seconds, assumed for an unlimited
// target read through commits in its first readings, before its own is
// learned (floorLearn healthy readings; the cadence, from which it is
// learned, takes two commits): up to one observation interval (at least
// the engage wait), less what is learned already. A consumer that commits
// about once per observation shows a whole commit of uncommitted work when
// its commit timer falls just after the observations (franz-go's 1 s
// auto-commit read every second: lag/ reads a 1 s wait, lagbridge bench),
// and limiting it for that locks the rate before the standing wait is
// known. Only while the consumer keeps up (consumed at least keepUpRatio
// of what was produced): a queue that builds from the start is no
// standing wait. A reading that measured nothing (no commit since the
// last move) of a consumer that commits about once per observation tells
// neither: one commit fell just after the observation, and the next
// reading measures two. Before, such a reading got no allowance, its
// second of uncommitted work read as a queue at the capacity measured the
// reading before, and the target was limited at its second fresh reading
// ("saturated: capacity 686/s, wait 1.11s", 800 msg/s offered to a
// consumer of 2,000), never learned its standing wait, and cycled through
// saturated, step-down and a probe from 0 until the drop (lagbridge bench
// kafka/autocommit-1s/sync/1s at 2x on Kafka 4.3.1: 9 false-throttle
// seconds before the drop; TestControllerStartupUnmeasuredNotAQueue). A
// consumer slow from the start shows it at the next reading, which
// measures. A consumer that commits less often (5 s) misses most readings'
// commits, so for it a reading that measured nothing gets no allowance.
func unlearnedWait(tc *control, v *reading) float64 {
	if !startupAtCommits(tc) {
		return 0
	}
	if !v.noQueue && ((v.measured || !onceObs(v)) && !(v.keepsUp || v.keptTwo) || !fromCommitsCadence(v)) {
		return 0
	}
	return max(max(v.engageWait, v.dt)-tc.floor, 0)
}

// acksAsItGoes reports whether st's consumer is seen acknowledging at
// least every engage/2 seconds: at each of its readings so far (at least
// two in a row, lag.State.AckedWithin; NATS only) the broker had processed
// an acknowledgement within E/2 before the reading. Its ack floor is then
// where it is, to within E/2 of work (the slack the head tests allow):
// no commit timer holds consumed work behind it, and the lag at the floor
// is work queued or in hand (see noQueueAtCommit). A consumer that
// acknowledges once a second reads acks under 200 ms old at two random
// readings in a row 1 time in 25 (more when its acks keep step with the
// readings, as for State.AckAge).
func acksAsItGoes(st *lag.State, engage float64) bool {
	return st.AckedWithin > 0 && st.AckedWithin.Seconds() <= engage/2
}

// startupAtCommits reports whether tc is in its first readings, its
// standing wait not learned yet (see unlearnedWait).
func startupAtCommits(tc *control) bool {
	return tc.floorSeen < floorLearn && tc.learnedSeen <= floorLearn && tc.measuredSeen <= 2*floorLearn
}

// floorCap is the most standing wait the controller learns, seconds: the
// engage wait, or, for a consumer that commits about once per observation
// (whose commits are read as they are), up to one commit interval (at
// most half the budget): half a commit of uncommitted work on average,
// and a whole one when the commit timer and the observations fall in
// phase, which no quota can remove.
func floorCap(v *reading) float64 {
	if v.cadence > 0 && v.cadence <= 1.5*v.dt {
		return max(v.engageWait, min(v.cadence, v.budget/2))
	}
	return v.engageWait
}

// fromCommitsCadence reports whether v reads a position from the commits of
// a consumer with a commit cadence (known or assumed).
func fromCommitsCadence(v *reading) bool { return v.commits || v.unlearned }

// waitOf is the wait of v.backlog at v.capacity, seconds: 0 with no
// backlog (or nothing measured yet to judge it by), +Inf with a backlog
// and nothing consumed.
func waitOf(v *reading) float64 {
	switch {
	case v.backlog <= 0 || (!v.measured && v.capacity <= 0):
		return 0
	case v.capacity > 0:
		return v.backlog / v.capacity
	}
	return math.Inf(1)
}

// fell reports whether v, a measured reading of an unlimited target, shows
// its consumer's capacity fell within the interval: read through the
// commits (or acks) of a consumer that commits about once per observation
// or more often (a learned cadence of at most 1.5 intervals, its standing
// wait learned, no partition avoided), the move it ends, taken alone
// (v.own: not averaged with the move before, see twoMoves), consumed
// less than 1 - StepThreshold of the capacity estimate, while the
// consumer had work the whole span: the lag at the move before, or what
// was produced over the span less what it consumed, exceeds the reading's
// noise, the work a healthy consumer holds consumed but uncommitted (the
// standing wait and E/4 of it at the estimate); the record at its
// commit had waited past that standing wait and E/2 (a queue, as
// noQueueAtCommit has it, not a commit's timing); and the consumer kept
// up over the two moves before (keptUpBefore).
//
// Such a reading read at the estimate from before the drop (2,016/s) is
// a wait under the engage wait: at 5x on kfake, read every 250 ms, the
// first reading after the drop of commit per poll and of NATS ack each
// showed lag +320 in the interval of 500 produced (about 720-750/s
// consumed, the head at the commit 0.16-0.17 s) and stayed unlimited at
// "wait 155-158ms" (twoMoves averaged the move to 1,357-1,374/s, and the
// head within E read as caught up at every commit, noQueue); the cut came
// a reading later, 0.25 s of the old rate past a consumer of 400/s
// (docs/results.md, session 34, excessbound; TestControllerFirstFall).
// Not for positions a consumer reports (the hook: a poll in hand reads
// still, and its reported spans are poll starts), estimates between
// commits, a first commit (a lower bound), a stall the observer shared,
// or a target already limited (its law reads the capacity every
// reading).
func (c *Controller) fell(tc *control, st *lag.State, v *reading) bool {
	if !v.measured || tc.limited || !tc.has || tc.stalled || v.lower || v.shadow || v.own <= 0 || v.prevCap <= 0 ||
		!fromCommits(st) || !v.learned || v.cadence <= 0 || v.cadence > 1.5*v.dt || !v.headKnown ||
		tc.floorSeen < floorLearn || len(v.avoid) > 0 || v.ownSpan > 1.5*v.dt || v.own >= (1-c.cfg.StepThreshold)*v.prevCap ||
		!keptUpBefore(v, 1-c.cfg.StepThreshold) {
		return false
	}
	standing := tc.floor + v.engageWait/2
	if v.headAge <= standing {
		return false
	}
	noise := (tc.floor + v.engageWait/4) * v.prevCap
	return v.startLag > noise || v.ownProduced-v.own*v.ownSpan > noise
}

// fallWait is the wait, seconds, the backlog of a reading that shows a
// fall (see fell) adds by the next decision: it grows at (P - C)/C
// seconds of wait a second at the capacity C the reading measured, for
// one interval. judge engages on the wait plus this, the wait predicted
// when the next decision can act: at 2x the new capacity values the
// first reading's backlog at about the engage wait (0.19-0.26 s), and
// the interval until the next decision doubles it. 0 without a fall.
func fallWait(tc *control, v *reading) float64 {
	if !v.fall || v.capacity <= 0 {
		return 0
	}
	return max(v.produced-v.capacity, 0) / v.capacity * tc.interval
}

// keptUpBefore reports whether each of the two moves before v's, taken
// alone, consumed at least ratio of what was produced over it or of the
// estimate, the smaller: a fall is a change from a consumer that kept up.
// A consumer that fell behind over the moves before (a start still
// warming up: the guard at 250 ms, 5x, 1,468 and 1,718 msg/s of 2,000
// produced, then 1,292/s, read as a fall and refused 170 messages before
// the drop, review-firstread) is not read so.
func keptUpBefore(v *reading, ratio float64) bool {
	for k := range v.ownBefore {
		if v.prodBefore[k] <= 0 || v.ownBefore[k] < ratio*min(v.prevCap, v.prodBefore[k]) {
			return false
		}
	}
	return true
}
