package quota

import (
	"fmt"
	"slices"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// probeStep is the relative step of a probe. Probing overshoots by at most
// Probe x rate x dt messages per interval; keep that within half the slack
// of the budget.
func (c *Controller) probeStep(v *reading) float64 {
	return min(c.cfg.Probe, (v.budget-v.setWait)/(2*v.dt))
}

// regime picks the rule that sets the rate in force (tc.rate, tc.limited)
// and says why.
func (c *Controller) regime(tc *control, st *lag.State, v *reading) (Rule, string) {
	inForce := tc.rate
	switch {
	case st.Status == lag.StatusStopped:
		tc.limited, tc.rate, tc.release = true, 0, 0
		return RuleConsumerStopped, "consumer stopped: " + st.Reason
	case v.held:
		return heldStall(tc, v)
	case !tc.limited && !v.engaged:
		return RuleUnlimited, unlimitedReason(v)
	case v.engaged:
		tc.limited = true
		tc.rate, tc.release = v.law, 0
		switch {
		case v.wait >= v.budget:
			tc.drained = true
			tc.satNew, tc.satSeen = 0, 0
			return RuleDrain, fmt.Sprintf("wait %s >= budget %s: a new message would be dead on arrival, draining", secs(v.wait), secs(v.budget)) + overdueNote(tc, st, v)
		case v.stillHead:
			return keptPause(st, v)
		case v.stepDown:
			return RuleStepDown, fmt.Sprintf("capacity fell from %.0f/s to at most %.0f/s during the interval: admitting nothing until the next observation measures it (wait %s)", v.prevCap, v.consumed, secs(v.wait))
		}
		if v.overdue {
			return RuleSaturated, overdueReason(tc, st, v)
		}
		tc.satCap, tc.satNew, tc.satSeen = max(tc.satCap, v.capacity), max(tc.satNew, v.capacity), tc.satSeen+1
		if v.fall {
			return RuleFall, fallReason(v)
		}
		return RuleSaturated, fmt.Sprintf("saturated: capacity %.0f/s, wait %s, target %s", v.capacity, secs(v.wait), secs(v.setWait))
	case !v.measured && st.Source == lag.SourceConsumer:
		// Limited, and the consumer reports a poll in hand (or nothing
		// in hand): see reportStill.
		return RuleAwaitCommit, fmt.Sprintf("reported position not moved (a poll in hand, or waiting for records): capacity not measured, keeping %.0f/s", tc.rate)
	case !v.measured:
		// Limited, and the consumer has not committed since it was last
		// seen to move: nothing new is known of its capacity; keep the
		// rate in force.
		return RuleAwaitCommit, fmt.Sprintf("no commit for %s (commit interval %s): capacity not measured, keeping %.0f/s",
			st.At.Sub(tc.moveAt).Round(time.Millisecond), st.CommitInterval, tc.rate)
	case !v.keepsUp || (v.queued > v.engageWait/2 && !v.spare):
		return follow(tc, st, v, inForce)
	case risenHead(tc, v):
		tc.rate, tc.release = min(v.law, v.consumed), 0
		return RuleFollow, fmt.Sprintf("head at the commit rose to %s (standing wait a trial told: %s), consumed %.0f/s of %.0f/s: keeping %.0f/s",
			secs(v.headAge), secs(tc.floor), v.consumed, v.produced, tc.rate)
	case v.estimated && tc.behindAt && tc.overshot && v.binding:
		// Caught up by the estimate only: between the commits of a
		// consumer whose last commit showed the backlog a probe made,
		// lag/ moves its position up to the end offset, where it reads
		// as caught up whatever the consumer does. Follow the law (no
		// probe) until a commit shows it caught up (see blindStep).
		tc.rate, tc.release = v.law, 0
		return RuleFollow, fmt.Sprintf("estimated between commits, the last one behind after a probe (wait %s): no probe until a commit shows the consumer caught up, capacity %.0f/s", secs(v.wait), v.capacity)
	}
	return c.caughtUp(tc, st, v, inForce)
}

// risenHead reports whether a target whose standing wait a trial told
// (tc.floorTold, set by raiseFloor for the under-cut trial, trialUnderCut,
// and the relearn trial, relearnStanding; never reset) shows a queue that
// standing wait hides: read through commits, its head at the commit rose
// by more than E/4 since the last measured reading while it consumed less
// than keepUpRatio of what was produced. The standing wait a trial tells can
// be most of a commit interval (0.8-0.9 s at 1 s auto-commits), and a
// head within it reads as no queue, so a consumer at its limit whose
// trial passed (the law cut the probe at the next reading, before a
// commit showed its surplus, and it caught up) was probed from a lumpy
// reading (606 msg/s consumed for a consumer of 400) to 909 and 1,364
// msg/s, its head 0.48 s read as caught up while it consumed 486 of 744
// msg/s; a queue of 1.5-4 s followed, dead work 3.8% in that run
// (TestSimOneSecondGrid at 2x, seed 3 with the first commit at 0.02 s).
// Such a reading is held at what the consumer consumed (the law, if
// lower): neither probed nor cut below what it showed it takes. Not while
// a partition is listed (v.avoid): the listing answers its queue, and a
// topic held at what it consumed while a slow partition was listed was
// cut to 36-37 msg/s of a 300 msg/s offer
// (TestControllerSlowPartitionListedAfterTrialTold).
func risenHead(tc *control, v *reading) bool {
	return tc.floorTold && v.commits && v.headRose && v.consumed < keepUpRatio*v.produced && len(v.avoid) == 0
}

// caughtUp is regime for a limited target that is caught up, or has
// capacity to spare: the capacity is invisible, so never cut; probe
// upward (multiplicative increase) while the consumer keeps up; release
// once the producers leave the rate in force (inForce) unused. Standing
// in, a rate unused is no evidence: hold it.
func (c *Controller) caughtUp(tc *control, st *lag.State, v *reading, inForce float64) (Rule, string) {
	if c.standIn && inForce > 0 && v.produced < c.cfg.ReleaseRatio*inForce {
		tc.release = 0
		return RuleProbe, fmt.Sprintf("caught up, the rate unused while standing in for a silent leader (producers may hold its leases): keeping %.0f/s", inForce)
	}
	if tc.release < 0 && inForce > 0 && v.produced < c.cfg.ReleaseRatio*inForce {
		// Adopted (a takeover): the producers have not had the rate yet
		// (they hold the former leader's leases, or its Kafka client
		// quotas throttle them), so its being unused says nothing of
		// the consumer. Probing it up meanwhile compounded, unused, to
		// several times the capacity, which the producers then used
		// all at once. Hold it while the adoption's grace runs.
		tc.release++
		return RuleProbe, fmt.Sprintf("caught up, the rate unused since it was adopted from another replica (producers may still be held to its leases or client quotas): keeping %.0f/s", inForce)
	}
	base := c.probeBase(tc, st, v, inForce)
	probed := max(tc.rate, v.law, base*(1+v.probe))
	tc.rate = max(probed, c.restoredProbe(tc, v, base))
	if v.blind {
		tc.rate, probed = min(tc.rate, tc.blindCap), min(probed, tc.blindCap)
	}
	if v.capped {
		tc.rate, probed = min(tc.rate, tc.capCap), min(probed, tc.capCap)
	}
	reopenCapped := false
	if cp := reopenCap(tc, v); cp > 0 {
		cp = max(cp, inForce)
		reopenCapped = tc.rate > cp
		tc.rate, probed = min(tc.rate, cp), min(probed, cp)
	}
	if v.produced < c.cfg.ReleaseRatio*inForce || inForce <= 0 {
		// (A rate of 0 cannot be probed up: caught up, it is released.)
		tc.release++
	} else {
		tc.release = 0
	}
	if tc.release >= c.cfg.ReleaseAfter {
		tc.limited, tc.release = false, 0
		return RuleRelease, fmt.Sprintf("caught up and the rate unused for %d observations: unlimited", c.cfg.ReleaseAfter)
	}
	v.raised = tc.rate > inForce
	if tc.rate > probed {
		tc.restored = true
		return RuleProbeRestored, fmt.Sprintf("caught up, and kept up over two moves with %.0f/s, a step above the %.0f/s it showed saturated: a capacity that came back, probing from %.0f/s to %.0f/s",
			(v.produced+v.prevProduced)/2, satShown(tc), base, tc.rate)
	}
	if v.relearn && v.raised {
		// A trial is a probe that went through: one capped at the rate
		// in force (blindStep, the probe cap) let nothing more in and
		// tells nothing; Step drops it and the next qualifying reading
		// tries.
		if unlearnedFloor(tc) {
			return RuleRelearn, fmt.Sprintf("head at the commit held at %s for %d readings, no standing wait learned, %.0f/s consumed while limited: a probe to %.0f/s tells a standing wait of its commit cadence from a queue",
				secs(v.headAge), floorLearn, tc.shown, tc.rate)
		}
		return RuleRelearn, fmt.Sprintf("head at the commit held at %s for %d readings, past the standing wait learned (%s): a probe to %.0f/s tells a standing wait its commit timer moved to from a queue",
			secs(v.headAge), floorLearn, secs(tc.floor), tc.rate)
	}
	if reopenCapped {
		return RuleProbe, fmt.Sprintf("caught up by the estimate between commits since a commit re-opened a hold that kept a pause (capacity %.0f/s then): probing from %.0f/s, a step above that at most until the commits show more",
			tc.reopen.base, tc.rate)
	}
	return RuleProbe, fmt.Sprintf("caught up: probing from %.0f/s", tc.rate)
}

// restoreSteps is the step of a restoredProbe in probe steps: 1+4p, x3
// at the default probe (p = 0.5) against the probe's x1.5, and smaller
// with a smaller ControllerConfig.Probe or a budget that caps the probe
// (probeStep).
const restoreSteps = 4.0

// restoredProbe returns the rate a probe from base may step to when v
// shows a capacity that came back (0: none; the probe's own step applies).
//
// A consumer limited through a capacity drop and caught up after the
// restore is probed up x1.5 a reading from where the law re-opened, which
// after a drain at the restore can be a few hundred msg/s or less: at 5x
// (2,000 msg/s offered to a consumer back at 2,000; lagbridge bench
// kafka/autocommit-1s/sync/1s on kfake) 22 -> 327 -> 490 -> 736 -> 1,103
// -> 1,655 -> 2,483 msg/s in one run, 453 -> 550 -> 825 -> 1,238 -> 1,857
// -> 2,785 in another, the consumer caught up at every commit all along:
// the producers were refused for 2-4 s of the judged window (from the
// restore plus a commit and an observation) while it idled
// (TestControllerRestoredClimb).
//
// The step is larger when the last decision was a probe (or a
// probe-restored), this one is a probe and not a relearn trial, the
// producers use the rate in force (v.binding), and the consumer kept up
// over this move and the one before (keepUpRatio, also of what was
// produced the interval before: its commits may run one observation
// behind) at a produce rate over the two a step (StepThreshold) above the
// highest capacity estimate of the readings the law decided as saturated
// in this limited episode, or since its last drain once satReadings of
// them read it (satShown), consumed no more than a step above
// what was produced in this move, and its head at the commit is at most
// the engage wait old. keptTwo is known only for positions read from
// commits with a learned cadence (twoMoves): the rule is inert for
// positions the consumer reports and before the cadence is learned. The
// last two conditions are what a consumer whose capacity has not come
// back still shows when its saturated estimates were low: lumpy commits of
// the previous poll read "saturated: capacity 228-326/s" for a consumer of
// 400 in the simulator's slow phase, which then kept up with 336-426
// msg/s over two moves, 1.31-1.47 times that, while it consumed 1.5 times
// what was produced (the backlog the move before left) or its head at the
// commit was 0.92 s old (TestSimOneSecondGrid's 2x previous-poll row,
// seeds 1, 4 and 8); after the restore a consumer caught up consumed
// 0.6-1.05 times what was produced, its head 0.0-0.7 s (0.05-0.09 s in the
// kfake recordings). The step is then 1+4p probe steps (restoreSteps: x3
// at the default probe of 0.5, less with a smaller ControllerConfig.Probe
// or a budget that caps the probe), at most one probe step above the rate
// the consumer kept up with while unlimited (tc.keptRate) when that is
// known; when it is not (a start or a takeover mid-overload learns none),
// once in a limited episode: repeated, x3 a reading compounds past any
// capacity. What it costs when wrong: a capacity that came back only part
// way is overshot by up to x3 for an interval and a commit, and the law
// drains it (the simulator, 2,000 -> 400 -> 600 msg/s at 5x over the
// grid's 40 runs: dead work 7.63 -> 7.78%, session 16, before the last
// two conditions).
func (c *Controller) restoredProbe(tc *control, v *reading, base float64) float64 {
	satCap := satShown(tc)
	if satCap <= 0 || base <= 0 || !v.binding || !v.keepsUp || !v.keptTwo || v.relearn || v.trial ||
		(tc.last.Rule != RuleProbe && tc.last.Rule != RuleProbeRestored) ||
		v.consumed < keepUpRatio*v.prevProduced ||
		v.produced+v.prevProduced < 2*(1+c.cfg.StepThreshold)*satCap ||
		tc.keptRate <= 0 && tc.restored ||
		v.consumed > (1+c.cfg.StepThreshold)*v.produced || v.headAge > v.engageWait {
		return 0
	}
	r := base * (1 + restoreSteps*v.probe)
	if tc.keptRate > 0 {
		r = min(r, max(base, tc.keptRate)*(1+v.probe))
	}
	return r
}

// satReadings is how many readings decided saturated since the last
// drain restoredProbe needs before it takes the highest capacity they
// read (tc.satNew) instead of the episode's (tc.satCap; see satShown).
const satReadings = 3

// satShown is the capacity restoredProbe reads as what the consumer
// showed saturated: the highest capacity estimate of the readings decided
// saturated since the last drain once there are satReadings of them, else
// the highest of the limited episode.
//
// Why: at 5x and 10x the producers are limited before the drop, and the
// episode's highest was the capacity before it (1,534-2,096 msg/s in
// lagbridge bench kafka/commit-per-poll/sync/1s 10x): after the restore
// no produce rate came a step above it before the probe had climbed x1.5
// a reading to the restored capacity, the producers refused while the
// consumer, caught up, consumed all they sent (TestControllerRestoredClimb).
// The drain after the drop (its wait past the budget) ends what the
// capacity before it tells. Fewer readings than satReadings are not
// taken: lumpy 1 s commits read a consumer of 400 msg/s saturated at
// 210-222 msg/s right after a drain, and over two moves it then kept up
// with 324-327 msg/s, a step above that (TestSimOneSecondGrid at 2x,
// seeds 2 and 6, the first commit at 0.8 s: both probe-restored in the
// slow phase when one reading was taken).
func satShown(tc *control) float64 {
	if tc.satSeen >= satReadings {
		return tc.satNew
	}
	return tc.satCap
}

// keptBack is the share of the rate a consumer kept up with while
// unlimited (tc.keptRate) that it must drain at for drainedAtCommits.
const keptBack = 0.9

// handMark is what a consumer's reports said it held at a reading: the
// records in hand, summed over the partitions with lag (-1: one of them
// not read from the consumer's reports, or reported without a count),
// the newest report's time, and each reported partition's report
// (see climbBack).
type handMark struct {
	held  int64
	at    time.Time
	parts []partMark
}

// partMark is one partition's report at a reading: its time and position.
type partMark struct {
	id  int32
	at  time.Time
	pos int64
}

// handOf returns what st's reports say the consumer holds (see handMark),
// its partitions appended to buf[:0] (the mark it replaces: one slice per
// target, not one a reading). A partition with lag whose report has
// nothing in hand holds none.
func handOf(st *lag.State, buf []partMark) handMark {
	m := handMark{parts: buf[:0]}
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		r := ps.Reported
		if ps.Lag > 0 && (ps.Source != lag.SourceConsumer || !r.HeadTime.IsZero() && r.Held <= 0) {
			return handMark{held: -1, parts: buf[:0]}
		}
		if ps.Lag > 0 && !r.HeadTime.IsZero() {
			m.held += r.Held
		}
		if r.At.After(m.at) {
			m.at = r.At
		}
		if !r.At.IsZero() {
			m.parts = append(m.parts, partMark{ps.Partition, r.At, r.Position})
		}
	}
	return m
}

// reportSpan returns the longest time between a partition's report at
// the reading before (prev) and its report in st, over the partitions
// whose reported position moved, and whether every one of them was
// reported then. Each member reports on its own (one goroutine a
// replica): a member whose report was 2 s old at the reading before
// moved 3 s of its work in this interval, which over another member's
// 1 s reads three times its rate.
func reportSpan(prev []partMark, st *lag.State) (float64, bool) {
	span := 0.0
	for i := range st.Partitions {
		r := st.Partitions[i].Reported
		if r.At.IsZero() {
			continue
		}
		j := slices.IndexFunc(prev, func(m partMark) bool { return m.id == st.Partitions[i].Partition })
		switch {
		case j >= 0 && prev[j].pos == r.Position:
		case j < 0:
			return 0, false
		default:
			span = max(span, r.At.Sub(prev[j].at).Seconds())
		}
	}
	return span, true
}

// climbBack returns the capacity estimate a reading of a consumer's
// reports restores after a fall (tc.fellFrom), 0 when none: once the
// consumer has caught up (no lag, or its head no older than E/2), what
// its position moved since the last reading (less what it skipped, where
// that is counted: see leaveOutSkipped) less what it held then (the
// records of the poll it had in hand may have been worked through
// before that reading; every record after them was polled and finished
// since), over the time between the two readings' reports (the longest
// of the partitions that moved, see reportSpan; none without a report at
// the reading before), is a rate it consumed at: up to the estimate from
// before the fall, or the rate the reading before read that way while
// not caught up (tc.drainRate) with its head past MaxAge, if higher.
// Once in a limited episode
// (tc.fellSpent), and only with the counts (lag.Report.Held) at the
// reading before.
//
// Why: a consumer of 2,000/s keeping up with 1,500/s that meets one
// record taking 2 s reads, in the stall, a capacity of 6-12/s (the
// records it holds over the time it has held them, see heldBound, or
// the one small poll its position moved by), and is drained, as it should
// be (MaxAge 2 s). It then drains the backlog within an interval, but
// its head was past MaxAge, so that rise was held as a skip burst (see
// estimateCapacity) and the probe climbed x1.5 a reading from the drain's
// rate while it sat caught up: about 11 s to 1,500/s, producers refused
// at 50 (plain hook) and 20 (guard) caught-up readings over 5 runs, down
// to 5/s (TestControllerStallClimbBack); a catch-up whose head was not
// past MaxAge, spread over the stall, read the stall's share (485/s) and
// climbed from there. What was
// consumed within the interval is no skip burst for a consumer that skips
// nothing; one behind the ttl guard whose capacity really fell may
// read one here, and is let in up to the estimate from before the fall
// for an interval, once, until its next reading shows the queue. A
// consumer whose capacity fell shows what it does: after a drop to 400/s
// behind the same stall, the capacity read once caught up stays at
// 399-551/s as before (TestControllerStallThenDrop).
//
// The reading before: a stall of 3 s leaves a backlog the consumer drains
// over two readings. The first, not caught up, shows the drain (946/s);
// the second, caught up, moved the little that was left (339, less the
// 346 it held: 6/s). Read alone, it spent the episode's climb on 6/s and
// the probe climbed from there (TestControllerStallLongClimbBack). The
// drain reading is taken only with its head past MaxAge: the ttl guard
// skips a record older than MaxAge (ttl.Rule.MaxAge is the policy's)
// when its turn comes, so a consumer whose head was that old worked
// through the records before it. Behind a guard whose capacity really
// fell, the drain is mostly skips nobody counts (Kafka) with a head
// within MaxAge: taken as capacity, 7% more records skipped at a 3 s
// stall into a drop to 400/s (TestControllerStallLongThenDropSkips).
// The best rate since the fall (every drain reading) cost 2.9% at 2 s.
func climbBack(tc *control, st *lag.State, v *reading) float64 {
	prev, before := tc.hand, 0.0
	if tc.drainAt.Equal(tc.lastAt) && tc.headLate {
		before = tc.drainRate
	}
	tc.drainRate, tc.drainAt = 0, st.At
	if tc.fellFrom <= 0 || tc.fellSpent || prev.held < 0 || prev.at.IsZero() || st.Source != lag.SourceConsumer || !v.measured {
		return 0
	}
	parts, known := reportSpan(prev.parts, st)
	if !known {
		return 0
	}
	moved := (st.ConsumeRateInstant - min(st.SkipRateInstant, st.ConsumeRateInstant)) * v.dt
	span := max(v.dt, parts)
	rate := (moved - float64(prev.held)) / span
	if queuedReading(v) {
		tc.drainRate = rate
		return 0
	}
	back := min(max(rate, before), tc.fellFrom)
	if back <= tc.capacity {
		return 0
	}
	tc.fellSpent = true
	tc.climbTo, tc.climbAt, tc.climbKept = back, st.At, 0
	return back
}

// climbRearm is how many caught-up readings after a climb back must keep
// its estimate before a new fall in the same limited episode may climb
// back too (see rearmClimb).
const climbRearm = 2

// rearmClimb re-arms the climb back (tc.fellFrom, tc.fellSpent) after
// climbRearm measured readings of the consumer caught up (no lag, or its
// head within E/2) since the climb restored tc.climbTo; a measured reading
// below a step (StepThreshold) of tc.climbTo ends the trial for the
// episode (tc.climbTo 0). A caught-up reading is never below
// (estimateCapacity lifts it to the estimate), so the rule as it acts is:
// two caught-up readings with no reading between that measured a queue
// below a step. It fires on any fall after those, not only on a second
// stall: in the hook row's slow phase after a real drop too (a climb to
// measured rates only; review-climb3's trace).
//
// Why: a climb back once per limited episode left a second stall in the
// same episode to climb from the drain: two 2 s stalls 4 s apart, the
// plain hook refused producers at 235 caught-up readings after the
// second over 40 runs, down to 7/s (now 11, at 1,173/s at the lowest;
// TestControllerStallTwiceClose). A consumer whose capacity really fell
// and that read a skip burst as its climb back (the ttl guard, uncounted
// skips) shows the queue at the next reading or the one after: its trial
// ends there and it is not let in again in that episode, as before. A
// consumer that kept the estimate and then stalls into a real drop gets
// the exposure of a new episode: behind a guard that skips (uncounted),
// 4 s apart, 1.8% more records skipped over 40 runs.
func rearmClimb(tc *control, st *lag.State, v *reading, cInst, step float64) {
	if tc.climbTo <= 0 || !v.measured || !st.At.After(tc.climbAt) {
		return
	}
	switch {
	case cInst < (1-step)*tc.climbTo:
		tc.climbTo = 0
	case queuedReading(v):
	case tc.climbKept+1 >= climbRearm:
		tc.fellFrom, tc.fellSpent, tc.climbTo = 0, false, 0
	default:
		tc.climbKept++
	}
}

// drainedAtCommits reports whether v reads the commits of a consumer that
// commits about once per observation, kept up with a known rate while
// unlimited (tc.keptRate), and has drained what it held at keptBack of
// that rate or more: the head at its commit shows no queue (v.noQueue, no
// older than its cadence allows), its lag is no more than was produced
// over that head (and E/2), and it consumed at least keptBack x keptRate.
//
// Such a reading right after a drain, or after a head past the deadline,
// is how a capacity that came back first shows through commits made once
// a second: the consumer drained the backlog the drain left (lagbridge
// bench, kafka/autocommit-1s/sync/1s at 2x on kfake: 770 and 1,337 msg/s
// over the interval, lag 0, the head at the reading before 2.72 s and
// 2.20 s). Held as a skip burst (see estimateCapacity) and stepped from
// the drain's 0 (see probeBase), the law re-opened at 207 and 332 msg/s
// and the probe climbed from there while the consumer idled: producers
// refused for 1-3 s of the judged window in 5 of 12 runs
// (TestControllerRestoreAfterDrainReopens). Without keptBack the slow
// phase's own drains re-opened the same way (lumpy commits read 450-592
// msg/s for a consumer of 400) and dead work rose in every kfake pair;
// a consumer that drained at the rate it kept up with before its overload
// shows that capacity back. Up to that rate, what it drained is no skip
// burst's gift: a consumer behind the ttl guard whose capacity did not come back
// re-opens at most to where it was before its overload, and its next
// commit shows the queue; the guard and the hook (commits per poll,
// reports) are not read this way.
func drainedAtCommits(tc *control, v *reading) bool {
	return v.commits && v.measured && v.headKnown && v.noQueue && tc.keptRate > 0 && v.consumed >= keptBack*tc.keptRate &&
		onceObs(v) && v.headAge <= floorCap(v)+v.engageWait/2 &&
		v.lag <= (v.headAge+v.engageWait/2)*max(v.produced, v.prevProduced)
}

// probeBase is the rate a probe steps up from: the rate in force, or,
// when more, what the consumer consumed over the interval (at most the
// capacity estimate), for a position read from commits made at least about
// once per observation (read as they are, see commitAge) that showed no
// standing wait (tc.floor, tc.headKept) beyond E/2 more than the one its
// commits run behind by (behindWait: a 1 s auto-commit read every second
// shows up to a second of uncommitted work, no queue), when that is a step
// above the capacity estimate before the reading (StepThreshold: a
// capacity that came back, not a drain at the capacity it had) with the
// head at the commit no older than that standing wait and E/2 (it drained
// what was queued: a partition that catches up in a burst behind a sticky
// partitioner, its head still old, read 404/s after 314/s and was probed
// into a drain in the simulator; a consumer held at its setpoint W* > E/2
// shows a head that much older), and a rate is in force (not right after
// a drain, where the law re-opens, unless the consumer drained what it
// held, see drainedAtCommits). A consumer that consumed more than it was allowed drained a
// backlog: it showed that rate over the interval, a lower bound of its
// capacity, so a probe from it overshoots that capacity by no more than a
// probe from the rate in force would overshoot the rate in force. Not for
// a consumer's reports (they move by whole polls: a poll's worth in one
// interval is no rate), nor
// for an estimate between commits, nor while the head was past the
// deadline (a consumer that skips expired messages, the ttl guard,
// "consumes" them at no cost; see estimateCapacity), again unless
// drainedAtCommits (the capacity estimate then bounds the step's base at
// the rate the consumer kept up with while unlimited).
//
// Why: once capacity returns, the consumer drains the slow phase's
// standing backlog within the first interval: at 1 s, 624 msg/s consumed
// against 404 allowed (the simulator, 2,000 -> 400 -> 2,000 msg/s, 800
// offered, commits every 100 ms). Probing from the 404 in force (the law
// gave 780) refused the producers for the next interval while the
// consumer sat idle; from 624 the probe admits the offer
// (TestSimRestoreProbesFromConsumed). A 1 s auto-commit read every second
// with its timer in phase (lagbridge bench's kafka/autocommit-1s/sync/1s)
// was left out while its standing wait of a second counted against E/2:
// probed from 470/s in force instead of 564/s consumed, it refused the
// producers 1.1 s after the restore plus one commit and one observation
// interval (TestSimOneSecondAutoCommit).
func (c *Controller) probeBase(tc *control, st *lag.State, v *reading, inForce float64) float64 {
	standing := behindWait(tc, v)
	if !fromCommits(st) || v.cadence > 1.5*v.dt || max(tc.floor, tc.headKept) > standing+v.engageWait/2 ||
		(inForce <= 0 || tc.headLate) && !drainedAtCommits(tc, v) ||
		!v.measured || !v.headKnown || v.headAge > standing+v.engageWait/2 ||
		v.consumed <= (1+c.cfg.StepThreshold)*v.prevCap {
		return inForce
	}
	return max(inForce, min(v.consumed, v.capacity))
}

// follow is the rule for a limited consumer under the engage threshold
// whose backlog grows or is not near empty: the consumer showed (some of)
// its capacity; follow the law, which here allows at least that. No
// probing into a consumer that may be at its limit, unless it showed
// capacity to spare (v.spare): then the standing lag is not work waiting
// for it (uncommitted work, messages in flight), and following it would
// lock the rate.
//
// When only the keep-up test failed and the position is the consumer's
// own (see exactPosition), its backlog near empty, the rate in force is
// held: the law rests on a capacity estimate that, while limited, is what
// the producers were allowed, and cutting to it refused producers while
// the consumer sat idle, and restarted the count towards release
// (lagbridge bench, kafka/hook/sync/1s at 2x: after the restore 3,175/s
// cut to 918/s of an 800/s offer, wait 70 ms, consumed 757/s of 799/s;
// before the drop 1,555/s cut to 1,036/s, wait 6 ms). A consumer really
// at its limit shows a backlog beyond E next.
func follow(tc *control, st *lag.State, v *reading, inForce float64) (Rule, string) {
	if exactPosition(st, v) && v.queued <= v.engageWait/2 {
		if v.binding && inForce > 0 {
			// The producers use the whole rate and are refused: holding
			// it refuses them again while the consumer sits idle
			// (lagbridge bench, kafka/hook/sync/1s at 2x after the
			// restore: 339/s held for an 800/s offer, consumed 301/s of
			// 336/s, wait 21 ms). A probe from the rate in force keeps
			// the probe's overshoot bound; a consumer at its limit
			// shows a backlog beyond E next.
			tc.rate = max(v.law, inForce*(1+v.probe))
			return RuleProbe, fmt.Sprintf("backlog near empty (wait %s), consumed %.0f/s of %.0f/s, the rate in use: probing from %.0f/s", secs(v.wait), v.consumed, v.produced, tc.rate)
		}
		tc.rate = max(v.law, inForce)
		return RuleFollow, fmt.Sprintf("backlog near empty (wait %s), consumed %.0f/s of %.0f/s: keeping %.0f/s", secs(v.wait), v.consumed, v.produced, tc.rate)
	}
	tc.rate, tc.release = v.law, 0
	return RuleFollow, fmt.Sprintf("backlog small (wait %s), consumed %.0f/s of %.0f/s: capacity %.0f/s", secs(v.wait), v.consumed, v.produced, v.capacity)
}

// exactPosition reports whether st's position is the consumer's own, as
// it consumes: reported by the consumer (idle or with work in hand), or
// committed more than twice per observation (not estimated between
// commits). Its lag is then work waiting, messages in flight, or written
// since an idle report, not uncommitted work.
func exactPosition(st *lag.State, v *reading) bool {
	return st.Source == lag.SourceConsumer || (fromCommits(st) && v.cadence <= v.dt/2)
}

// fallReason says why RuleFall decided (see Controller.fell).
func fallReason(v *reading) string {
	return fmt.Sprintf("capacity fell: consumed %.0f/s of %.0f/s produced with work the whole %s (estimate %.0f/s): saturated at it, wait %s, %s predicted at the next decision, target %s",
		v.consumed, v.produced, secs(v.span), v.prevCap, secs(v.wait), secs(v.wait+v.fallWait), secs(v.setWait))
}
