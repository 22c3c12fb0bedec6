package quota

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// cadence is the commit cadence the controller reads a position with,
// seconds: the learned one (State.CommitInterval). While it is not learned
// yet (the Tracker needs two moves of the committed offsets), an unknown
// cadence is no evidence that the consumer stopped: a position from
// commits, or from first sight (lag.SourceFirstSight, no commit yet), is
// taken to move at the auto-commit interval of franz-go and the Java
// client (firstCommitEvery), unless it was seen to move in two
// observations in a row (tc.quick: it commits at least once per
// observation, and is read as it is). 0 for a position from the
// consumer's reports, whatever cadence lag/ learned from the group's
// commits: it moves once per poll, not per commit (see reportStill); and 0
// for an estimate before the cadence is learned (it moves whenever the
// consumer consumes).
func cadence(tc *control, st *lag.State) float64 {
	switch {
	case st.Source == lag.SourceConsumer:
		return 0
	case st.CommitInterval > 0:
		return st.CommitInterval.Seconds()
	case st.Source == lag.SourceFirstSight, fromCommits(st) && tc.quick < 2:
		return firstCommitEvery.Seconds()
	}
	return 0
}

// caughtUpAtCommit sets v.blind and tracks tc.caughtUp.
//
// Between the commits of a consumer that commits less often than it is
// observed, lag/ estimates its position from the rate measured from commit
// to commit. When the consumer was caught up at its last commit, that
// rate is what it was offered, not what it can do: producers that send
// more (a probe raising the rate) read as a backlog growing at the
// difference, and the consumer as saturated, until the next commit shows
// it idle. So at each commit the controller notes whether the consumer
// was caught up: on every partition with a new commit, the record at the
// committed position was at most E/2 old when committed (the commit dated
// as lag/ dates it, half an interval before the reading that saw it), the
// "near empty" of a probe. Until the next commit (or until that one is
// overdue), such a consumer's estimated backlog is not taken as
// saturation, and the probe it allows is capped at one probe step above
// the rate produced over the commit span that ended caught up (what the
// consumer is known to keep up with): if the commit misled, the next one
// shows it, and what was admitted meanwhile is at most one probe step
// over one commit interval.
func (c *Controller) caughtUpAtCommit(tc *control, st *lag.State, v *reading) {
	if st.Source != lag.SourceEstimate || st.CommitInterval.Seconds() <= 1.5*v.dt {
		tc.caughtUp, tc.lastCommit = false, time.Time{}
		return
	}
	var newest time.Time
	for i := range st.Partitions {
		if ps := &st.Partitions[i]; ps.LastCommit.After(newest) {
			newest = ps.LastCommit
		}
	}
	v.estimated = true
	if newest.After(tc.lastCommit) {
		c.atCommit(tc, st, v, newest)
	}
	tc.sinceCommit += v.produced * v.dt
	overdue := st.At.Sub(tc.lastCommit).Seconds() > 1.5*st.CommitInterval.Seconds()+v.dt
	v.blind = tc.caughtUp && !overdue && (tc.limited || v.produced <= tc.blindCap)
	v.capped = tc.overshot && !tc.sureCaught && !overdue && tc.capCap > 0
}

// atCommit reads a new commit (newest) of a consumer whose position is
// estimated between its commits: whether it was caught up at it (on
// every partition with a new commit, the record at the committed
// position was at most E/2 old, the commit dated half an interval before
// the reading), surely caught up (at most E/2 old at the reading, which
// the dating cannot explain away) or behind beyond the dating (more than
// E/2 old one interval before the reading, the earliest the commit can
// have been made), and sets the caps of the probes until the next one
// (see blindStep).
func (c *Controller) atCommit(tc *control, st *lag.State, v *reading, newest time.Time) {
	caught, behind, sure := true, false, true
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if !ps.LastCommit.After(tc.lastCommit) || ps.CommittedLag <= 0 {
			continue
		}
		atCommit := ps.CommittedHeadAge - st.At.Sub(ps.LastCommit)
		if !ps.HeadKnown || atCommit.Seconds() > v.engageWait/2 {
			caught = false
		}
		if ps.HeadKnown && ps.CommittedHeadAge.Seconds()-v.dt > v.engageWait/2 {
			behind = true
		}
		if !ps.HeadKnown || ps.CommittedHeadAge.Seconds() > v.engageWait/2 {
			sure = false
		}
	}
	// What it kept up with: the rate produced over the span that
	// ended at this commit.
	kept := 0.0
	if span := newest.Sub(tc.lastCommit).Seconds(); !tc.lastCommit.IsZero() && span > 0 {
		kept = tc.sinceCommit / span
	}
	// Caught up again after a span in which the producers used the
	// capped probe: the consumer took more than it had shown, and is
	// caught up all the same.
	again := (tc.caughtUp && caught || !tc.behindAt && !behind) && kept >= bindRatio*tc.capCap
	step := c.blindStep(v, st.CommitInterval.Seconds())
	dated, base, rate := datesSetpoint(tc, v), kept, spanRate(tc, st, newest)
	if dated {
		// Where a commit tells a consumer at its setpoint from one
		// caught up, the probe cap holds through a drain (a restore
		// shows at a commit: caught up, surely or again, or a span
		// consumed at more than twice the capacity, beyond what
		// commits of polls scatter), "again" needs the producers to
		// have used half a step above the cap's base (at the capacity
		// it read as caught up as often as not), and the base is at
		// least what the consumer committed over its span (after a
		// drain the producers sent next to nothing).
		again = again && kept >= (1+step/2)*tc.capBase
		if kept > 0 {
			base = max(kept, rate)
		}
	}
	switch {
	case dated && tc.capacity > 0 && rate > 2*tc.capacity, !dated && tc.drained:
		tc.overshot = false
	case behind:
		tc.overshot = true
	}
	tc.lastCommit, tc.caughtUp, tc.sinceCommit = newest, caught && kept > 0, 0
	tc.behindAt, tc.sureCaught, tc.drained = behind, sure || again, false
	tc.blindCap = kept * (1 + c.probeStep(v))
	if dated {
		// The blind cap never cuts below this commit's own probe cap
		// (see blindStep).
		tc.blindCap = max(tc.blindCap, base*(1+step))
	}
	tc.capCap, tc.capBase = base*(1+step), base
}

// datesSetpoint reports whether a commit, dated as lag/ dates it (half an
// interval before the reading that saw it), tells a consumer held at its
// setpoint from one caught up: the record at the first one's commit is at
// least the setpoint wait W* old, which reads at least W* - Δ/2 once the
// commit is dated, and that is past the E/2 a caught-up commit reads at
// most when W* > (Δ + E)/2 (at a 250 ms interval, W* = Δ; not at 1 s,
// where W* = Δ/2 and a commit at the setpoint made in the last 0.2 s
// before the reading reads caught up). Where it cannot, only a probe tells the two apart. Δ is the
// smoothed interval (the one W* comes from): one late reading does not
// change the answer.
func datesSetpoint(tc *control, v *reading) bool {
	return v.setWait > (tc.interval+v.engageWait)/2
}

// spanRate is what the consumer consumed from its previous commit
// (tc.spanAt, tc.spanPos, which commitSpan moves on after this) to the
// newest one, msg/s; 0 while unknown.
func spanRate(tc *control, st *lag.State, newest time.Time) float64 {
	if tc.spanAt.IsZero() || !newest.After(tc.spanAt) {
		return 0
	}
	return max(float64(committedPos(st)-tc.spanPos), 0) / newest.Sub(tc.spanAt).Seconds()
}

// blindStep is the relative step of a probe above what a consumer kept
// up with over its last commit span, until its next commit (cadence
// seconds away), while overshot: what the step admits beyond its
// capacity, if the commit misled, is seen only at that commit, so the
// step keeps it, over a commit and an observation interval, within half
// the slack of the budget (as probeStep does over one observation).
//
// Why: a consumer held at its setpoint behind 5 s commits reads,
// at its commit, the same as one caught up (the commit is dated to half
// an interval), and lag/ then estimates it keeping up at up to twice its
// rate until the end offset, so the estimate reads lag 0 and the
// controller probes x1.5 a reading: 133 to 461 msg/s for a consumer of
// 100 for a whole commit interval (the lead's A/A trace), then a drain.
// Once a commit has shown the consumer behind after a span without a
// drain (the controller's own probe put it there), the probes until
// each next commit are capped at one such step above what the producers
// sent over the last commit span, unless a commit shows the consumer
// surely caught up (or caught up again after the producers used the
// cap); and while the last commit showed it behind, it is not probed
// at all (regime). A drain starts over where a commit cannot tell a
// consumer at its setpoint from one caught up (datesSetpoint: at a 1 s
// interval): after it the consumer's backlog says nothing of the probes,
// and a consumer whose capacity came back (a restore) is re-opened at the
// full probe step. Where a commit can (at 250 ms), the cap holds through
// a drain, from a base of at least what the consumer committed over its
// span: a restore shows at a commit there (caught up, or a span consumed
// at more than twice the capacity), and starting over re-opened the
// same x1.5 probes at the next commit that read caught up (the simulator,
// TestSimSteadyOverload at 250 ms seed 2: 66.8% goodput, now 99.6%).
// There the blind cap (one probe step above what the producers sent over
// the span, see caughtUpAtCommit) is never below the commit's own probe
// cap: after a restore the commit's cap rests on what the consumer
// consumed, the blind cap on the slow phase's rate the producers were
// held to, and a reading between commits that the producers' use of the
// commit's rate made look backlogged cut the rate back to the blind cap,
// the next one let it up again: 954 -> 544 -> 954 -> 544 msg/s of an
// 800 msg/s offer, refused while the consumer idled (lagbridge bench,
// kafka/autocommit-1s/sync/250ms at 2x; TestControllerBlindCapKeepsCommitCap).
func (c *Controller) blindStep(v *reading, cadence float64) float64 {
	return min(c.probeStep(v), (v.budget-v.setWait)/(2*(cadence+v.dt)))
}

// commitAge is how long ago, in seconds, a consumer that commits less
// often than it is observed committed the position st reports:
// State.Uncertainty when the observer knows it, else the time since the
// position was last seen to move plus half an interval (the commit
// happened within the interval before that sighting). The commits of a
// consumer that commits about once per observation or more often are
// exact enough (the cadence is learned at the resolution of the
// interval, so one that commits every poll reads the same): 0. It is at
// most one commit interval and one observation interval: a consumer that
// has not committed for longer is overdue, not taken to be consuming what
// it has not committed (lag/ stops its estimate there too), so the head
// of a group stuck for 78 s is 78 s of wait, not 78 s of slack.
func commitAge(tc *control, st *lag.State, v *reading) float64 {
	if v.cadence <= 1.5*v.dt {
		return 0
	}
	age := st.At.Sub(tc.moveAt).Seconds() + v.dt/2
	if u := st.Uncertainty.Seconds(); u > 0 {
		age = u
	}
	return min(age, v.cadence+v.dt)
}

// backlog sets v.backlog: the work waiting for the consumer, which is the
// lag less what the consumer consumed since its last commit (v.since at
// the smaller of its capacity and the produce rate: the commit slack).
// A position that is not a commit is taken as it is.
//
// Between commits (nothing measured) the lag only grows by what is
// produced, so the backlog is extrapolated from the one at the last move:
// plus what was produced since, minus what the consumer consumed at its
// capacity when it was saturated then, or at the produce rate when it was
// not (then nothing tells whether it still keeps up, and it is taken to:
// overload shows at the next commit, the blind spell a commit-only
// observer has). Not at the first commit after first sight that measures
// nothing (v.sightCommit): the position moved to it, and the backlog
// before it was the first-seen lag, which that commit consumed (on kfake,
// a group idle at first sight read that lag again one reading later:
// "saturated: capacity 299/s, wait 201ms" for a lag of 7).
func backlog(tc *control, v *reading, at time.Time) {
	if v.measured || !v.commits || v.sightCommit {
		v.backlog = max(v.lag-min(v.capacity, v.produced)*v.since, 0)
		tc.moveBacklog = v.backlog
		return
	}
	elapsed := at.Sub(tc.moveAt).Seconds()
	drained := v.capacity * elapsed
	if !tc.saturated {
		drained = max(drained, tc.spanProduced)
	}
	v.backlog = max(tc.moveBacklog+tc.spanProduced-drained, 0)
}

// readCapacity is the capacity a reading starts from: the estimate, or 0
// when nothing was measured since a stall (see estimateCapacity): the
// estimate kept from before it is for the reading that measures again, not
// a capacity to read a wait at meanwhile (TestControllerStallUnmeasuredAfter).
func readCapacity(tc *control) float64 {
	if tc.stalled {
		return 0
	}
	return tc.capacity
}

// estimateCapacity sets v.capacity: the smoothed consume rate, restarted
// from the instant one when they differ by more than StepThreshold (a step
// is under way: react now, not one time constant later).
//
// A reading lowers the estimate only when it measures the capacity: one
// with work queued (a lag of at least the engage wait at the rate it
// consumed; with less, or none, the consumer consumed what it was given,
// a lower bound: nothing consumed of nothing produced is no capacity of
// 0), in which the consumer consumed something (nothing consumed is a
// stall, see below), and, for a position estimated between commits (a
// model of the consumer, not a measure of it), only a commit that found
// the consumer behind (see commitSpan). Without these, the estimate followed the rate
// admitted while a backlog drained and the quota followed the estimate:
// down to a few messages a second for a consumer of 2,000.
func (c *Controller) estimateCapacity(tc *control, st *lag.State, p *Policy, v *reading) {
	cInst := v.consumed
	switch {
	case st.Source == lag.SourceEstimate && !v.spanMeasured:
		span, measured := c.commitSpan(tc, st, v)
		if !measured {
			span = max(cInst, span)
		}
		cInst = span
	case v.fall:
		// The capacity fell: measured by this move alone (see fell).
	case cInst < tc.capacity && (v.lag <= 0 || v.lag < v.engageWait*cInst || v.noQueue || v.shadow):
		cInst = tc.capacity
	case v.noQueue:
		cInst = max(cInst, v.produced)
	}
	if v.lower {
		cInst = max(cInst, tc.capacity)
	}
	if cInst <= 0 && v.lag > 0 && tc.capacity > 0 {
		// Nothing consumed with work waiting: a stall (of the machine,
		// or of the partitions not avoided while the consumer drained
		// the late ones), not a capacity, as for a report that stands
		// still (see reportStill). This reading's wait is unbounded (a
		// consumer that stopped is at the floor one interval on, as
		// before); the estimate is kept for the next reading that
		// measures the capacity (until then, and as the ceiling, the
		// capacity is this reading's 0: see judge and readCapacity).
		// Taken as the estimate, one such reading in a drain set it to
		// 0: once the consumer had drained the backlog and sat caught
		// up, the law re-opened from what the producers were allowed
		// (0, then about 1 msg/s) and the probe climbed x1.5 a reading
		// from there (lagbridge demo under machine load, session 17
		// CI: no release of batch-export in the demo's 30 s;
		// TestControllerStallNotCapacity). The next reading that
		// measures the capacity restarts the estimate, as it did from 0
		// (tc.stalled): a rise is not held as a skip burst at the
		// estimate from before the stall (held, a consumer back after
		// 40 s stopped, TestSimStoppedConsumer, re-opened from the 500/s
		// of the interval it stopped in, not from the 1,500/s it
		// consumed); only a reading that is no measure of it (no lag, a
		// lower bound) keeps it.
		v.capacity, tc.stalled = 0, true
		return
	}
	cInst = skipHold(tc, p, v, cInst)
	cInst = pollBurst(tc, v, cInst, c.cfg.StepThreshold)
	cInst = lateShareBack(tc, st, v, cInst, c.cfg.StepThreshold)
	cInst = max(cInst, climbBack(tc, st, v))
	rearmClimb(tc, st, v, cInst, c.cfg.StepThreshold)
	if st.Source == lag.SourceConsumer && tc.fellFrom <= 0 && !tc.fellSpent && cInst < (1-c.cfg.StepThreshold)*tc.capacity {
		tc.fellFrom = tc.capacity
	}
	tc.capBefore = tc.capacity
	if !tc.has || tc.capacity <= 0 || tc.stalled || math.Abs(cInst-tc.capacity) > c.cfg.StepThreshold*tc.capacity {
		tc.capacity = cInst
	} else {
		tc.capacity += (1 - math.Exp(-v.dt/c.cfg.Smoothing.Seconds())) * (cInst - tc.capacity)
	}
	tc.capLower, tc.stalled = v.lower, false
	v.capacity = tc.capacity
}

// skipHold holds a rise in cInst, the capacity a reading measured, at
// the estimate while the head was past the deadline, and returns it.
//
// The head was past the deadline: consumers that skip expired
// messages (the ttl guard) or retention then "consume" in bursts
// that cost them nothing. Skips the observer counted are out of
// the consumption already (leaveOutSkipped); this is for those
// nobody counts (Kafka's guard, a NATS server that drops the
// term's reason, retention). A rise seen now is not capacity; hold
// the estimate until the head is live again (at most the time to
// drain what is late, since the quota keeps new work out). An
// estimate that is only a lower bound (tc.capLower: from a first
// commit, see consumption) is not held: the next reading
// measures the rate from commit to commit. A consumer that has
// drained what it held (drainedAtCommits) is taken up to the
// rate it kept up with while unlimited, no further.
func skipHold(tc *control, p *Policy, v *reading, cInst float64) float64 {
	if !(tc.has && (tc.headLate || v.headAge > p.MaxAge.Seconds()) && tc.capacity > 0 && cInst > tc.capacity && !tc.capLower && !tc.stalled) {
		return cInst
	}
	if drainedAtCommits(tc, v) {
		cInst = min(cInst, max(tc.capacity, tc.keptRate))
	} else {
		cInst = tc.capacity
	}
	// Nor is it capacity for the next reading, which twoMoves
	// may measure over this move and its own: the move counts
	// there at the rate held, or the rate the consumer kept up
	// with while unlimited when more (a capacity that came back
	// shows that much; whether it kept up over the two moves,
	// keptTwo, still reads the move whole). Averaged in whole, a ttl guard of 2,000
	// msg/s that committed past 5,086 msg/s of expired records
	// while its head was late read 3,295 msg/s at the next
	// reading, its head live again: taken as its capacity, the
	// probe stepped from it to 4,943 msg/s, drained 0.75 s later
	// (lagbridge bench kafka/guard/sync/1s at 10x on kfake,
	// session 34; TestControllerSkipBurstNotAveraged).
	//
	// Only a move that a skip burst could have made: a rise is held
	// whenever the head was late, and most are no skips. One that
	// moved past more records still within MaxAge (liveWork) than the
	// rate held allows worked through them, skips or not: the rate held
	// is too low, and the move is averaged whole, as before. A
	// commit-per-poll consumer of 400 msg/s, its head 7.3 s old after a
	// stall, drained 545 records, 255 of them produced within MaxAge,
	// held at 227 msg/s; counted at 227 at the next reading, the capacity
	// read 311 then 641 msg/s, and the restore's faster probe came a
	// reading later (TestControllerRestoredClimb, cpp1s-10x-late). Nor a
	// move over more than an observation (a stall, then the catch-up):
	// the guard skips what it meets within a poll loop, and over a
	// stall a catch-up and a skip burst read alike; one of 1,991 msg/s
	// over 5 s, a consumer of 2,000 whose capacity came back, counted
	// at the 401 held, read 549 msg/s where main read 1,751
	// (TestControllerSkipHoldCatchUpAveraged). Where the two cannot be
	// told apart, the move is averaged as before.
	if w := &tc.prevMove; w.span > 0 && w.span <= burstSpan*v.dt && liveWork(w, p, v) <= cInst*w.span {
		w.held = max(cInst, tc.keptRate)
	}
	return cInst
}

// burstSpan: a move over at most this many observation intervals may
// be a skip burst (see skipHold); one over more spans a stall.
const burstSpan = 1.5

// liveWork returns the least a consumer that skips every record older
// than MaxAge (the ttl guard) worked through in move w, read at v: the
// records produced within MaxAge of the move's end (over w, and over
// the move before at v.prevProduced, taken as long as w at most) less
// the lag left, which holds the newest. A guard skips only the rest.
func liveWork(w *moveWindow, p *Policy, v *reading) float64 {
	maxAge := p.MaxAge.Seconds()
	live := w.produced * min(1, maxAge/w.span)
	live += v.prevProduced * min(max(maxAge-w.span, 0), w.span)
	return min(max(live-v.lag, 0), w.msgs)
}

// idleBefore reports whether v reads the commits of a consumer that had
// no lag at the last observation (on the partitions not avoided) and
// holds nothing older than the time since (its head at the commit, plus
// the time since the commit, is at most one interval): every record it
// holds was written after it was seen caught up, so no queue can have
// formed, and the consumption read is when its commits fell, a lower
// bound of its capacity. After an interval in which the producers sent
// nothing (a pause, a drain), commits made just after the observation
// cover only the records written in between: read as the capacity, 24
// msg/s of 297 drained the topic, the next interval (nothing sent)
// measured 255 msg/s, the one after 24 again, every other observation for
// 2.5 s while the consumer kept up with everything (lagbridge bench
// --hot-partition at 250 ms on kfake; TestControllerIdleBeforeNotDrained).
// A consumer seen acknowledging as it goes (acksAsItGoes) has no commits
// that fall after the observation: its ack floor is where it is, so the
// consumption read is what it consumed, and a queue that formed within
// the interval is a queue. Read as idle before, a NATS pull consumer
// acking each message, seen with lag 0 at the reading before its capacity
// fell from 2,000 to 400 msg/s, read lag 1,577 and head 0.79 s at the
// next as "saturated: capacity 2005/s", was allowed 1,718 msg/s, and was
// drained only at the reading after, 0.25 s later with 1,938 queued
// (lagbridge bench nats/ack-each/sync/1s at 5x; TestControllerAckingIdleBeforeDrop).
// Such a consumer is idle before all the same when the interval's
// production ran well over the estimate (burstOver): a queue a burst
// formed after a reading at lag 0 is what the consumer did not reach,
// idle for part of the interval, not a lower capacity. Without this, an
// acking consumer of 2,500 msg/s estimated at 2,000, offered 1,000 and
// then 3,000 records in 0.1 s, read 1,450 msg/s and was limited to 438
// msg/s (TestSimAckingIdleBurst).
func idleBefore(tc *control, st *lag.State, v *reading) bool {
	return tc.has && tc.othersLag <= 0 && v.commits && v.headKnown && v.headAge+v.since <= v.dt && (!acksAsItGoes(st, v.engageWait) || burstOver(tc, v))
}

// burstOver reports whether v's interval produced more than half as much
// again as the capacity estimate: a burst, not the steady offer a
// consumer kept up with until its capacity fell.
func burstOver(tc *control, v *reading) bool {
	return tc.capacity > 0 && v.produced > 1.5*tc.capacity
}

// idleSince returns the time, seconds, since the reading a new target's
// partitions were recorded at (sightParts: its rates not known yet) when
// none of them had lag then, else -1. Called before lateParts, which
// replaces that record.
func idleSince(tc *control, st *lag.State) float64 {
	if tc.has || tc.partsAt.IsZero() || !st.At.After(tc.partsAt) {
		return -1
	}
	for _, pt := range tc.parts {
		if pt.lag > 0 {
			return -1
		}
	}
	return st.At.Sub(tc.partsAt).Seconds()
}

// idleAtSight reports whether v is the first fresh reading of a target
// that had no lag at the reading before (idleSince: sight seconds ago)
// and holds nothing older than that (its head, at the commit, no older
// than the time since and E/2; its lag no more than was produced over
// it): every record it holds was written after it was seen caught up, so
// no queue can have formed, and its consume reading is what its first
// commits (or reports) moved since, a lower bound of its capacity, as for
// idleBefore. Read as its capacity, the first fresh reading of a new group
// committing every 250 ms, read every 250 ms (some partitions not
// committed yet), 54 msg/s consumed of 313 produced, lag 62, head 0.24 s,
// limited it: "saturated: capacity 54/s, wait 1.142s", then probes and
// follows for 3 s (lagbridge bench --hot-partition --hot-interval 250ms on
// real Kafka; TestControllerIdleAtSightNotAQueue). A consumer slow from
// the start shows a head past the time since within a reading or two.
func idleAtSight(v *reading, sight float64) bool {
	return sight > 0 && writtenSince(v, sight, sight)
}

// noQueueAtCommit reports whether st reads the commit of a consumer that
// commits about once per observation (a cadence of more than half an
// interval and at most one and a half) whose head at the commit shows no
// queue: at most E/2 older than the standing wait it showed while healthy
// (tc.floor; until that is learned, floorLearn readings after the cadence
// is, the larger of it and tc.headKept, at most floorCap: a learned
// standing wait is the current one, a head kept from the first readings
// may be of a commit timer that has drifted since, and kept a 2x drop
// unseen for a reading in one bench run, excess 1.5x its bound). Its lag
// is then consumed work it has not committed yet, not work queued, and a low consume reading is its commit's timing (a
// franz-go 1 s auto-commit read every second reads 3 msg/s, then 1,634,
// of 800), a lower bound of its capacity: read as its capacity at the
// reading that learned the cadence, it drained a healthy consumer
// (lagbridge bench, kafka/autocommit-1s at 2x, refused before the drop).
// A consumer whose capacity fell shows a queue: the record at its commit
// waited longer.
func noQueueAtCommit(tc *control, st *lag.State, v *reading) bool {
	if !fromCommits(st) || !v.headKnown {
		return false
	}
	perObs := onceObs(v)
	if startupAtCommits(tc) && (!v.learned || perObs) {
		// The first readings, the standing wait not learned and the
		// cadence perhaps not either: a head at most one interval old
		// (at least E, at most half the budget) whose lag is no more
		// than was produced since is a commit of uncommitted work, not
		// a queue. From its first measured reading, a 1 s auto-commit
		// read every second that commits a few records reads 40 msg/s
		// consumed of 800 (lag 760, head 0.96 s): taken as its
		// capacity, it was drained, limited, and never learned its
		// standing wait (lagbridge bench, autocommit-1s at 2x, 4 runs
		// of 6; TestControllerOneSecondCommitsFirstReading). A
		// consumer slow from the start shows a head past that within
		// a reading or two.
		standing := min(max(v.dt, v.engageWait), v.budget/2)
		if acksAsItGoes(st, v.engageWait) {
			// No commit timer: a consumer seen acknowledging as it
			// goes holds no consumed work behind its ack floor. A NATS
			// pull consumer acking each message, read every second at
			// 10x from the start, was read as one (lag 3,931, head
			// 0.98 s, "capacity 3,999/s") and given a second of startup
			// allowance ("queued 983ms less 1s"): unlimited, it was
			// drained at the next reading with 3 s of work queued
			// (lagbridge bench nats/ack-each/sync/1s at 10x;
			// TestControllerAckingFirstReading).
			standing = 0
		}
		return v.headAge <= standing+v.engageWait/2 && v.lag <= (v.headAge+v.engageWait/2)*max(v.produced, v.prevProduced)
	}
	if !perObs {
		return false
	}
	standing := tc.floor
	if tc.floorSeen < floorLearn {
		standing = max(standing, min(tc.headKept, floorCap(v)))
	}
	return v.headAge <= standing+v.engageWait/2
}

// commitSpan measures, at each new commit of a consumer whose position is
// estimated between commits, what it consumed from its previous commit to
// this one (msg/s, from the committed offsets and the commits' times):
// its capacity when it was behind at this commit (the record at a
// committed position had waited more than the engage wait when the
// commit was made, as lag/ dates it), else a lower bound of it. It
// returns the rate and true when it measured the capacity, else the
// higher of that lower bound and tc.capacity.
func (c *Controller) commitSpan(tc *control, st *lag.State, v *reading) (float64, bool) {
	var newest time.Time
	var pos int64
	behind := false
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if !withCommit(ps) {
			continue
		}
		pos += ps.Committed
		if ps.LastCommit.After(newest) {
			newest = ps.LastCommit
		}
		if ps.LastCommit.After(tc.spanAt) && ps.CommittedLag > 0 && ps.HeadKnown {
			atCommit := ps.CommittedHeadAge - st.At.Sub(ps.LastCommit)
			behind = behind || atCommit.Seconds() > v.engageWait
		}
	}
	if !newest.After(tc.spanAt) {
		return tc.capacity, false
	}
	prevAt, prevPos := tc.spanAt, tc.spanPos
	if !tc.span2At.IsZero() && pos >= tc.span2Pos && newest.After(tc.span2At) {
		v.twoRate = float64(pos-tc.span2Pos) / newest.Sub(tc.span2At).Seconds()
	}
	tc.span2At, tc.span2Pos = prevAt, prevPos
	tc.spanAt, tc.spanPos = newest, pos
	if prevAt.IsZero() || pos < prevPos {
		return tc.capacity, false
	}
	rate := float64(pos-prevPos) / newest.Sub(prevAt).Seconds()
	if !behind {
		return max(rate, tc.capacity), false
	}
	return rate, true
}

// correctedSpan measures a reading whose commit corrected the estimate
// (State.Corrected: the commit landed behind the position estimated
// before it) by the commits: what the consumer committed from its
// previous commit to this one (commitSpan), when this commit found it
// behind (the record at the commit had waited more than the engage wait)
// and the previous commit is at most two cadences (or observations) older.
// The consumer was then slower than the estimate took it to be, and the
// commits are the measure of it: a capacity drop shows at once. Measuring
// nothing there, a 1 s auto-commit whose cadence read 2 s (a commit that
// fell just after an observation) kept the capacity of 1,599/s its
// estimate showed before a drop to 400 for two corrected readings in a
// row, "saturated: capacity 1599/s, wait 475ms", and 1,600 messages were
// admitted after the drop, twice the bound (lagbridge bench
// kafka/autocommit-1s/sync/1s at 2x on kfake, dead work 5.4%;
// TestControllerCorrectedCommitMeasures). A corrected commit it does not
// measure leaves the span where it was (commitSpan moves it on), so the
// next measured reading spans it, as before correctedSpan: a commit that
// found the consumer behind after a gap still lowers the capacity there.
// (commitSpan finds nothing behind without a previous commit.)
func (c *Controller) correctedSpan(tc *control, st *lag.State, v *reading) {
	prevAt, prevPos, prev2At, prev2Pos := tc.spanAt, tc.spanPos, tc.span2At, tc.span2Pos
	rate, behind := c.commitSpan(tc, st, v)
	if !behind || tc.spanAt.Sub(prevAt).Seconds() > 2*max(v.cadence, v.dt) {
		tc.spanAt, tc.spanPos, tc.span2At, tc.span2Pos, v.twoRate = prevAt, prevPos, prev2At, prev2Pos, 0
		return
	}
	v.consumed, v.span, v.measured, v.spanMeasured = rate, v.dt, true, true
	leaveOutSkipped(st, v)
	v.spanProduced = v.produced * v.dt
	v.keepsUp = v.consumed >= keepUpRatio*v.produced
}

// saturatedLaw sets v.law, v.stepDown and v.probe.
//
// The law: consume rate plus the backlog error over tau; nothing while a
// new message would be dead on arrival. Draining (backlog above the
// setpoint) uses tau; filling up to the setpoint uses a slower tauFill, so
// that a saturated consumer is never offered more than maxFill above its
// capacity.
// fellReadSpacing is the smoothed observation interval, seconds, from
// which a reporting consumer's first engaged reading after it was
// unlimited is a step-down (see saturatedLaw): twice the fastest cadence
// the daemon reads at (250 ms), so a target read at the engaged cadence
// or a 250 ms interval is left out and one read at 1 s, woken early, is
// not.
const fellReadSpacing = 0.5

func (c *Controller) saturatedLaw(tc *control, st *lag.State, v *reading) {
	cfg := &c.cfg
	tau := lawTau(v)
	tauFill := max(tau, (v.setWait-v.engageWait)/maxFill)
	v.setBacklog = v.setWait * v.capacity
	law := v.capacity + (v.setBacklog-v.backlog)/tau
	if v.backlog < v.setBacklog {
		law = v.capacity + (v.setBacklog-v.backlog)/tauFill
	}
	if v.wait >= v.budget {
		law = 0
	}
	// A step down is measured over an interval that straddles it: the
	// instant rate mixes the old capacity with the new one, so it
	// overstates the new one, and every message admitted on it joins a
	// queue that now drains slower than it looks. When the consumer was
	// saturated before the step and its backlog covers another interval
	// even at the rate it just showed (so a pause cannot starve it),
	// admit nothing for one interval and decide on the next, clean
	// measurement (which is clean: the step was in the interval before).
	// Nothing consumed of no backlog is no step: caught up after a
	// drain that admitted nothing, the first reading paused the grant
	// at 0/s for another second (TestControllerNoStepDownCaughtUp).
	// A consumer that reports, unlimited before (offered its capacity,
	// the hook at 5x), is read so too: its first engaged reading after a
	// drop is a poll in hand still (at most Held in HeldFor, an upper
	// bound) or a move whose span straddles the drop, neither of them the
	// new capacity; taken as the capacity, they admitted 1,045 msg/s for
	// 0.3 s ("saturated: capacity 1209/s") and 377 msg/s ("909/s") to a
	// consumer of 400 (lagbridge bench kafka/hook/sync/1s at 5x, session
	// 35; TestControllerFellFromUnlimited). Consumers read from commits
	// keep the rule as it was (their first reading after a fall is
	// RuleFall's, see fell, which leaves reported positions out). Only
	// for a target read about once a second or slower (its smoothed
	// interval at least fellReadSpacing): read every 250 ms, a reporting
	// consumer's poll in hand shows as a fall without one (review-hook,
	// session 35: a model group of three reporting members at 250 ms,
	// step-downs 352 -> 667, refused while idle +40%), and the wake's
	// late first decision this answers does not happen there.
	fellUnlimited := !tc.limited && st.Source == lag.SourceConsumer && tc.interval >= fellReadSpacing
	v.stepDown = v.measured && tc.has && (v.wasSaturated || fellUnlimited) && !tc.paused && v.prevCap > 0 &&
		v.consumed < (1-cfg.StepThreshold)*v.prevCap && v.backlog > 0 && v.backlog >= v.consumed*v.dt
	v.stepDown = v.stepDown || v.stillHead
	if v.stepDown {
		law = 0
	}
	v.law = max(law, 0)
	v.probe = c.probeStep(v)
}

// lawTau is the time, seconds, in which the law drains a backlog above
// the setpoint: the budget's slack over the target wait, at least two
// intervals.
func lawTau(v *reading) float64 { return max(v.budget-v.setWait, 2*v.dt) }

// unlimitedReason says why an unlimited target stays so: the wait within
// the engage wait, or, when the wait is over it, what the controller read
// as no queue (the consumer keeping up with spare capacity, an estimate
// since a commit it caught up at, or the part of the wait over the
// standing wait and the startup allowance, which engage compares). Printed
// alone, "wait 1.447s <= engage 400ms" read as a contradiction (session
// 16, a 1 s auto-commit row on kfake).
func unlimitedReason(v *reading) string {
	switch {
	case v.wait <= v.engageWait:
		return fmt.Sprintf("wait %s <= engage %s: unlimited", secs(v.wait), secs(v.engageWait))
	case v.spare:
		return fmt.Sprintf("wait %s, but the consumer keeps up with capacity to spare: unlimited", secs(v.wait))
	case v.blind:
		return fmt.Sprintf("wait %s estimated since a commit it caught up at, no queue until a commit says so: unlimited", secs(v.wait))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "wait %s, queued %s", secs(v.wait), secs(v.queued))
	if v.queued < v.wait {
		fmt.Fprintf(&b, " (the head at the commit less the standing wait %s)", secs(v.standing))
	}
	if v.allowance > 0 {
		fmt.Fprintf(&b, " less %s of startup allowance (the standing wait not learned yet)", secs(v.allowance))
	}
	fmt.Fprintf(&b, " <= engage %s: unlimited", secs(v.engageWait))
	return b.String()
}

// pollBurst reads a rise of a consumer that commits each poll, about once
// or twice per observation (v.cadence), at the 250 ms interval's setpoint
// (datesSetpoint), over the two moves it ends (v.twoRate: or, for a
// position estimated between commits, the two commit spans; the late
// partitions' drain left out as from v.consumed) when the move is a
// poll's burst: a poll's work is committed when the poll ends, and a poll
// is as large as the backlog it found, so one observation's move holds
// work done partly in the observation before (whose move read low), and
// reads faster than the consumer is. A burst rises more than
// stepThreshold above both the estimate and the two moves, while
// saturated and with the avoid list unchanged, and either the two moves
// show no rise or the last decision was a pause (a step down or a drain
// on the low move restarted the estimate from it). Taken as the capacity,
// such moves of a consumer of 2,000 msg/s restarted the estimate at
// 2,582-3,058 msg/s after a pause, and the law admitted up to 3,975 msg/s
// on it (lagbridge bench, kafka/commit-per-poll/sync/250ms at 10x on
// kfake; TestControllerPollBurst). A rise the two moves show after a
// reading that admitted (a restore) is read as it is. (A low move with a
// queue is still believed: a capacity drop must be seen at once.) After a
// pause a burst is not held below the estimate from before it
// (tc.capBefore, up to the move): a false step down on a low move
// restarted the estimate low, and the two moves, the low one in them,
// held the true 2,080 msg/s that corrected it at 1,440 while the consumer
// idled (review-standing; TestSimCommitCadenceNotHeldBeforeDrop).
func pollBurst(tc *control, v *reading, cInst, stepThreshold float64) float64 {
	if v.twoRate <= 0 || v.cadence <= 0 || v.cadence > 2.5*v.dt || !datesSetpoint(tc, v) ||
		tc.capacity <= 0 || tc.stalled || !v.wasSaturated || !slices.Equal(v.avoid, tc.last.AvoidPartitions) {
		return cInst
	}
	two := max(v.twoRate-v.lateOut, 0)
	if cInst <= (1+stepThreshold)*max(two, tc.capacity) {
		return cInst
	}
	paused := tc.last.Rate == 0 && (tc.last.Rule == RuleStepDown || tc.last.Rule == RuleDrain)
	if two > (1+stepThreshold)*tc.capacity && !paused {
		return cInst
	}
	if paused {
		return max(two, tc.capacity, min(cInst, tc.capBefore))
	}
	return max(two, tc.capacity)
}
