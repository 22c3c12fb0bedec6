package quota

import (
	"math"
	"slices"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// judge decides whether the consumer keeps up, has capacity to spare, and
// is saturated (v.keepsUp, v.spare, v.engaged), and updates the ceiling:
// the capacity the consumer showed when it was last saturated, raised by
// any higher rate it consumed since.
func (c *Controller) judge(tc *control, v *reading) {
	// As measured: consumed against produced, over this move or, for
	// commits read as often as observations, this move and the one
	// before (one of them may hold no commit).
	kept := v.keepsUp || v.keptTwo
	v.keepsUp = v.keepsUp || (v.measured && (v.backlog <= 0 || c.keepsUpAtCommits(tc, v)))
	// Limited, and caught up at every commit: the standing wait of its
	// cadence is no queue, whether or not the producers use the rate.
	v.spare = v.keepsUp && (v.caught && tc.limited || v.trial || v.binding && v.consumed < (1-c.cfg.StepThreshold)*tc.ceiling && v.backlog <= v.engageWait*tc.ceiling)
	// Whether work is queued: the wait, less the standing wait the
	// target shows while healthy (tc.floor: what consumed-but-uncommitted
	// work and messages in flight look like), which no quota can remove.
	// With positions from commits the wait rests on a consume rate
	// measured between commits known only to an interval, which is off
	// by up to a commit when the span covers more than one observation;
	// then, or while the consumer keeps up by that measure, the age of
	// the message at the committed position (the wait it had) must
	// agree: the smaller counts. (A consumer seen not to keep up over
	// one interval is believed: the head age lags the wait by the time
	// the queue took to form.)
	queued, raw := v.wait, v.rawWait
	v.standing = tc.floor
	if v.commits && v.headKnown && (v.keepsUp || v.keptTwo || v.span > 1.5*v.dt) {
		queued, raw = min(queued, v.headAge-tc.floor), min(raw, v.headAge)
	}
	if v.noQueue {
		// Its capacity not lowered by the reading, the wait understates
		// the standing wait the head at the commit shows.
		raw = v.headAge
	}
	v.queued = max(queued, 0)
	v.fallWait = fallWait(tc, v)
	v.engaged = v.wait+v.fallWait > v.engageWait && !v.spare
	if v.shadow && shadowExplains(v) && (v.engaged || v.measured && !v.keepsUp) {
		// A stall the observer shared: not believed yet (observerStall).
		v.held, v.engaged = true, false
	}
	// Caught up at its last commit, estimated since: the backlog the
	// estimate shows is what the producers sent beyond the rate it
	// consumed before, which was what it was offered, not its capacity.
	// Not evidence of saturation until a commit says so (a probe it
	// allows is capped, see caughtUpAtCommit).
	v.blind = v.blind && (v.engaged || !v.keepsUp || v.queued > v.engageWait/2)
	if v.blind {
		v.keepsUp, v.queued, v.engaged = true, 0, false
	}
	if !tc.limited {
		tc.satCap, tc.restored, tc.satNew, tc.satSeen = 0, false, 0, 0
		v.allowance = unlearnedWait(tc, v)
		v.engaged = v.engaged && v.queued+v.fallWait-v.allowance > v.engageWait
		if !v.engaged {
			tc.fellFrom, tc.fellSpent, tc.climbTo, tc.lateWork = 0, false, 0, 0
		}
		if fromCommitsCadence(v) && v.measured && v.headKnown && kept && !v.engaged && !v.held {
			tc.headKept = max(v.headAge, tc.headKept*math.Exp(-v.dt/floorMemory))
			tc.keptRate = max(v.produced, tc.keptRate*math.Exp(-v.dt/floorMemory))
		}
		if v.commits && v.learned && v.measured && kept && !v.engaged && !v.held {
			// Healthy: learn the standing wait (its recent peak, up to
			// floorCap, forgotten over floorMemory), once the cadence it
			// comes from is known, from readings that show the consumer
			// keeping up (a queue that builds is no standing wait).
			learnFloor(tc, v, min(raw, floorCap(v)))
		}
	}
	switch {
	case !v.measured || v.held:
	case v.engaged:
		// v.capacity: a stall reading's own, 0 (see estimateCapacity).
		// Kept at the estimate from before the stall, the ceiling made
		// a hung consumer with a small backlog "spare" (consumed 0 of
		// a ceiling it no longer has) and released it
		// (TestControllerStallHungNotSpare).
		tc.ceiling, tc.saturated = v.capacity, true
	default:
		tc.ceiling, tc.saturated = max(tc.ceiling, v.consumed), false
	}
}

// learnFloor learns the standing wait w, seconds, from a healthy reading:
// tc.floor is its recent peak, forgotten over floorMemory. A standing wait
// learned from the first floorLearn readings (tc.floorEarly) may be the
// startup's, not the cadence's: a first commit that spans the startup, or
// a commit timer in phase with the observations then that has drifted
// since. Once floorLearn healthy readings after them all show one smaller
// by more than E/2, the peak is what they showed (and the oldest head kept,
// tc.headKept, at most that); one that shows it again makes it the
// cadence's. Held for floorMemory, a 1 s auto-commit read
// every second that showed 0.82-0.95 s in its first readings and 0.002 s
// in every one after hid a capacity drop for two readings: its head at the
// commit, 0.52 s, was within the standing wait, the queue beyond it 0.25 s
// at the next (lagbridge bench kafka/autocommit-1s/sync/1s at 2x on kfake,
// excess after the drop 1.49x its bound; TestControllerEarlyFloorForgotten).
func learnFloor(tc *control, v *reading, w float64) {
	held := tc.floor * math.Exp(-v.dt/floorMemory)
	tc.floor = max(w, held)
	switch {
	case tc.floorSeen < floorLearn:
		tc.floorEarly = tc.floorEarly || w > 0 && w >= held
	case !tc.floorEarly:
	case w+v.engageWait/2 >= held:
		tc.floorEarly = false
	default:
		tc.floorLess++
		tc.floorLow = max(tc.floorLow, w)
		if tc.floorLess >= floorLearn {
			tc.floor, tc.headKept, tc.floorEarly = tc.floorLow, min(tc.headKept, tc.floorLow), false
		}
	}
	if !tc.floorEarly {
		tc.floorLess, tc.floorLow = 0, 0
	}
	tc.floorSeen++
}

// raiseFloor learns head, a head at the commit, as the standing wait (up
// to floorCap) when a trial told it is one (see trialUnderCut,
// relearnStanding): the cadence's, not the startup's.
func raiseFloor(tc *control, v *reading, head float64) {
	tc.floor, tc.floorEarly, tc.floorTold = max(tc.floor, min(head, floorCap(v))), false, true
}

// consumption sets v.consumed, v.span, v.measured and v.keepsUp, aware of
// the consumer's commit cadence (State.CommitInterval).
//
// A consumer that commits less often than it is observed moves its
// committed position in jumps: an interval without a commit reads as
// nothing consumed, the one with the commit as several intervals' worth.
// Neither is its rate. So while the cadence is known, there is lag and the
// position has not moved, the interval measures nothing (the capacity is
// unknown, not 0) until the commit is overdue (see overdue: then nothing
// consumed is taken at its word); and a move is spread over the time
// since the previous one (for a group first seen without a commit, its
// first commit over the time since first sight, see firstCommit). With the cadence unknown, or positions that move every
// interval (an estimate), this is the interval's consume rate. A
// consumer's reports move once per poll: see reportStill.
func (c *Controller) consumption(tc *control, st *lag.State, v *reading) {
	cadence := v.cadence
	if st.Source == lag.SourceFirstSight && tc.sightAt.IsZero() {
		tc.sightAt = lastMove(st)
	}
	if st.Corrected && tc.sightAt.IsZero() {
		// A commit corrected the estimate: this interval's consume
		// rate counts nothing; measure from here, unless the commit
		// found the consumer behind, when the commits measure it
		// (correctedSpan). (A first commit
		// behind the position a group without one was first seen at
		// is no fresh start: the span runs on from first sight.)
		tc.moveAt, tc.spanProduced, tc.moveGap = st.At, 0, 0
		c.correctedSpan(tc, st, v)
		return
	}
	if st.Source == lag.SourceConsumer && st.ConsumeRateInstant <= 0 && st.Lag > 0 {
		reportStill(tc, st, v)
		return
	}
	moved := st.ConsumeRateInstant > 0 || st.Lag <= 0 || cadence <= 0
	if !moved && (!tc.has || tc.moveAt.IsZero()) {
		// The first sighting: the span starts when the position last
		// moved as far as the state says (see lastMove), else now. One
		// that is overdue already measures at once: a group that has
		// not committed since long before this controller started
		// (a restart, a takeover) consumes nothing, whatever rate it
		// has yet to show.
		tc.moveAt, tc.spanProduced, tc.quick, tc.still, tc.moveGap = lastMove(st), 0, 0, true, 0
		if !overdue(tc, st, v, st.At.Sub(tc.moveAt).Seconds()) {
			return
		}
	}
	span := v.dt
	if !tc.moveAt.IsZero() {
		span = max(st.At.Sub(tc.moveAt).Seconds(), v.dt)
	}
	switch {
	case !moved || span > 1.5*v.dt:
		tc.quick = 0
	case st.ConsumeRateInstant > 0 && fromCommits(st):
		tc.quick++
	}
	tc.still = (tc.still || !moved) && tc.quick < 2 && st.CommitInterval <= 0
	produced := tc.spanProduced + v.produced*v.dt // messages since the last move
	switch {
	case moved && firstCommit(tc, st) && !behindAtCommit(st, v):
		// No evidence yet: measure from this commit on (its lag is the
		// backlog, see backlog).
		tc.moveAt, tc.spanProduced, tc.moveLag, tc.sightAt, tc.moveGap = st.At, 0, st.Lag, time.Time{}, v.dt
		v.sightCommit = true
		return
	case moved:
		span = moveSpan(tc, st, v, span, c.cfg.Interval.Seconds())
		v.consumed, v.span = st.ConsumeRateInstant*v.dt/span, span
		tc.movePoll, tc.movePollAt = reportedPoll(st), st.At
		leaveOutSkipped(st, v)
		v.own, v.ownSpan, v.ownProduced, v.startLag = v.consumed, span, produced, float64(tc.moveLag)
		v.ownBefore, v.prodBefore = tc.ownBefore, tc.prodBefore
		tc.ownBefore, tc.prodBefore = [2]float64{v.consumed, tc.ownBefore[0]}, [2]float64{produced / span, tc.prodBefore[0]}
		tc.moveAt, tc.spanProduced, tc.moveLag, tc.moveGap = st.At, 0, st.Lag, v.dt
		if firstCommit(tc, st) {
			v.lower, tc.sightAt = true, time.Time{}
		}
		span, produced = twoMoves(tc, st, v, span, produced)
	case overdue(tc, st, v, span):
		// Overdue: the consumer consumed nothing that it committed.
		v.consumed, v.span, tc.spanProduced = 0, span, produced
	default:
		tc.spanProduced = produced
		return
	}
	v.measured = true
	v.spanProduced = produced
	v.keepsUp = v.consumed*span >= keepUpRatio*produced
}

// moveSpan is the span, seconds, that a move seen now is measured over,
// from span, the time since the reading that saw the move before it. A
// move is dated half its reading's spacing before that reading (as lag/
// dates a commit): at an even spacing the two halves cancel. When the
// readings came faster since (the loop's engaged interval, an early
// cycle), the move before may have come anywhere in its longer spacing,
// and the span runs from the middle of it: from the reading alone, the
// first 0.2 s span after a 1 s reading read a commit-per-poll consumer
// slowed to 400 msg/s as consuming 1,078/s, taken as its capacity, and
// 1,183 msg/s were admitted past it (lagbridge bench on kfake, 2x at 1 s
// with the engaged interval, session 30; TestControllerFasterReadingsSpan).
// A position the consumer reported is not widened so (widened there,
// TestControllerStallThenDropSkips read a catch-up above 600/s at 3
// readings and TestControllerLateShareBack a share below its case, from
// the early cycles of their reports): it is measured from the poll start
// the report at the move before showed to this one's (reportedPoll), when
// that is longer. A report shows a poll's first record, made on the
// reporter's own 0.25 s tick: a 0.25 s span between two readings held two
// poll starts where the one before held none, and the consumer read at up
// to twice its rate (3,344-3,756/s for a consumer of 2,000/s right after
// the switch to the engaged interval, lagbridge bench kafka/hook/sync/1s
// 10x on kfake, session 31; TestControllerSwitchReportSpan read 3,600/s).
// Never shortened (measured from poll start to poll start whatever the
// readings' span, TestControllerStallTwiceClose read the catch-up after a
// stall low and refused producers at 847-889/s). For commits, only
// when the spacing shrank by fasterSpacing or more, as lag/ tells a
// faster reading (partTrack.seenGap): within the jitter of an even
// spacing the halves cancel on average, and widening at every shorter
// one would only lower the readings (no test tells this guard; none of
// the package's fails without it). And only from a spacing of about the
// configured interval (base, seconds) to one of at most half of it, the
// engaged interval's switch: at a 250 ms interval on a loaded machine the
// readings came 0.14-0.9 s apart, and widening there fired 2-13 times in 6
// of testdata's 250 ms recordings and lowered the capacity read
// (hot250-kafka-loaded: 173/s for 243/s before the slowdown;
// TestMoveSpanOnlyFaster). Never shortened: readings that come slower
// again are measured as before.
func moveSpan(tc *control, st *lag.State, v *reading, span, base float64) float64 {
	if st.Source == lag.SourceConsumer {
		if at := reportedPoll(st); !at.IsZero() && tc.movePollAt.Equal(tc.moveAt) && !tc.movePoll.IsZero() && at.After(tc.movePoll) {
			return max(span, at.Sub(tc.movePoll).Seconds())
		}
		return span
	}
	if tc.moveGap < fasterSpacing*v.dt ||
		tc.moveGap < base*3/4 || v.dt > base/2 {
		return span
	}
	return span + (tc.moveGap-v.dt)/2
}

// reportedPoll is when the poll whose first record st's reports show as
// the position started (Reported.At - HeldFor): a reported position moves
// when a poll starts, by the whole poll before it, so a move is measured
// from the poll start the report before it showed to this one, not from
// reading to reading. Zero unless every partition with lag is read from a
// fresh report of one poll with records in hand (see heldBound), and none
// finishes at its own pace (its position moves record by record).
func reportedPoll(st *lag.State) time.Time {
	var at time.Time
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag <= 0 {
			continue
		}
		r := ps.Reported
		if ps.Source != lag.SourceConsumer || r.OwnPace || r.HeadTime.IsZero() || r.Held <= 0 || r.HeldFor <= 0 {
			return time.Time{}
		}
		since := r.At.Add(-r.HeldFor)
		if !at.IsZero() && !since.Equal(at) {
			return time.Time{}
		}
		at = since
	}
	return at
}

// fasterSpacing is how many times longer than now's the spacing at the
// move before must be for moveSpan to date that move within it.
const fasterSpacing = 1.5

// twoMoves reads a move of a position read from commits about as often as
// it is observed (a learned cadence), and returns the span and the
// messages produced that v's consumption is measured over.
//
// One interval holds a commit's worth more or less than was consumed in
// it (a 250 ms cadence read every 250 ms reads half its rate, then one and
// a half). A low reading while the head shows no queue (its age at most
// the engage wait) is that, not a slower consumer: it is measured over
// this move and the one before, which span at least two commits. A low
// reading with a queue is believed (a capacity drop must be seen at
// once).
func twoMoves(tc *control, st *lag.State, v *reading, span, produced float64) (float64, float64) {
	if st.CommitInterval <= 0 || !fromCommits(st) {
		tc.prevMove = moveWindow{}
		return span, produced
	}
	own := moveWindow{msgs: v.consumed * span, produced: produced, span: span}
	if w := tc.prevMove; w.span > 0 {
		v.prevProduced = w.produced / w.span
		v.keptTwo = own.msgs+w.msgs >= keepUpRatio*(own.produced+w.produced)
		v.twoRate = (own.msgs + w.msgs) / (span + w.span)
	}
	if w := tc.prevMove; w.span > 0 && othersHead(st, tc.last.AvoidPartitions)-behindWait(tc, v) <= v.engageWait {
		msgs := w.msgs
		if w.held > 0 {
			msgs = min(msgs, w.held*w.span)
		}
		if avg := (own.msgs + msgs) / (span + w.span); avg > v.consumed {
			span += w.span
			v.consumed, v.span = avg, span
			produced += w.produced
		}
	}
	tc.prevMove = own
	return span, produced
}

// firstCommit reports whether st shows the first commit of a group first
// seen without one (tc.sightAt), its position past the first-sight one.
//
// What the commit moved past that position over the time since first
// sight is a lower bound of the consumer's rate (it commits what an
// earlier poll returned, and the span may hold a faster spell), not its
// capacity: a consumer that keeps up reads as consuming less than was
// produced. It is taken as a reading (v.lower) only when the consumer was
// behind by half the budget at that commit (behindAtCommit); otherwise the commit
// measures nothing, and the consumption is measured from it on.
func firstCommit(tc *control, st *lag.State) bool {
	return !tc.sightAt.IsZero() && st.Source != lag.SourceFirstSight
}

// behindAtCommit reports whether the record at st's newest commit had
// waited longer than half the budget when the commit was made (the head
// age, less the time since the commit as lag/ dates it, half an
// observation before the reading that saw it): a consumer a poll behind a
// caught-up position shows far less. In lagbridge bench at 2x and a 1 s
// interval, the first commit read 0.4-0.5 s so for a consumer that kept
// up (the plain 5 s row), 1.0-1.5 s when its capacity had dropped 1.5 s
// before it (--short), 1.6-3.3 s when 4 s before (+no-commit-yet).
func behindAtCommit(st *lag.State, v *reading) bool {
	if !st.HeadAgeKnown || st.Lag <= 0 {
		return false
	}
	return (st.HeadAge - st.At.Sub(lastMove(st))).Seconds() > v.budget/2
}

// overdue reports whether a position with lag that has not moved for span
// seconds (since it last moved, or since there was nothing to consume) is
// overdue: the consumer consumed nothing that it committed. A consumer
// that commits at a cadence is overdue 1.5 commit intervals plus one
// observation after its last move. One that has not moved since its group
// was first seen live without a commit (tc.sightAt; lag.SourceFirstSight,
// or a first commit behind that position) is overdue once its first
// commit is (firstCommitDue): the auto-commit timer of franz-go and of
// the Java client starts when the consumer joins, before it could be
// seen, so a consumer that consumed anything commits within
// firstCommitEvery of first sight. It must also have lag that old (the
// head age, when known): a record written a moment ago on a quiet topic
// may be consumed and wait for the next commit.
func overdue(tc *control, st *lag.State, v *reading, span float64) bool {
	if tc.sightAt.IsZero() {
		return span > 1.5*v.cadence+v.dt
	}
	if st.HeadAgeKnown {
		span = min(span, st.HeadAge.Seconds())
	}
	return span > firstCommitDue(v.dt)
}

// firstCommitDue is how long after a live group without a commit was first
// seen its first commit is overdue, seconds, at observation interval dt:
// firstCommitEvery, one observation to see it, and half a second or half
// an observation of margin (the commit's own latency, the time an
// observation takes).
func firstCommitDue(dt float64) float64 {
	return firstCommitEvery.Seconds() + dt + max(dt/2, 0.5)
}

// reportStill reads an interval in which a position from the consumer's
// reports (lag.SourceConsumer) did not move while there is lag. The hook
// reports the first record in hand until the next poll, so the position
// moves once per poll: a position that stands still is a poll still being
// worked through (the consumer is busy, not stopped; the head age, from
// the record in hand, is exact all the same), and its next move, the
// whole poll, is spread over the time since the previous one (see
// consumption). Nothing consumed is no reading of its capacity (read as
// one, it set the capacity to 0 and the next interval several times the
// true one); but it bounds it. The poll in hand was taken at or before
// the observation its position was first seen at (tc.moveAt), and held at
// most the lag seen then (tc.moveLag); the consumer has been busy on it
// since, so it consumed less than that lag in that time. Once that bound
// is below the capacity estimate, it is the reading: a consumer that
// slows down or hangs inside a poll reads ever slower, never below what
// it does. With no estimate yet, the bound is no better than a guess
// until the poll has taken longer than the budget (its first record is
// late by then): from then on it is the reading. (The hook's
// KeepUntilFinished mode reports a count of the records finished, in any
// order, which moves with each: standing still, it finished none.) A
// report with nothing in hand is a consumer waiting for records (the lag came
// after the report): not busy, nothing measured; the time busy starts
// again at the next report with work in hand (as after a move to no lag:
// the poll came after it).
//
// A consumer that says how many records it holds and for how long it has
// finished none of them (lag.Report.Held, HeldFor: the hook, from its
// polls) bounds it exactly and at once, without waiting an interval: it
// consumed fewer than it holds in that time (see heldBound).
func reportStill(tc *control, st *lag.State, v *reading) {
	tc.spanProduced += v.produced * v.dt
	repAt := st.At.Add(-st.Uncertainty)
	if idleReported(st) {
		tc.moveAt, tc.spanProduced, tc.moveGap = time.Time{}, 0, 0
		return
	}
	first := !tc.has || tc.moveAt.IsZero() || tc.moveLag <= 0
	if first {
		// Busy since its poll, at or before this report.
		tc.moveAt, tc.spanProduced, tc.moveLag, tc.moveGap = st.At, 0, st.Lag, 0
		tc.movePoll, tc.movePollAt = reportedPoll(st), st.At
	}
	if bound, busy, ok := heldBound(st); ok {
		stillBound(tc, v, bound, busy, v.produced*busy)
		return
	}
	if first {
		return
	}
	busy := repAt.Sub(tc.moveAt).Seconds()
	if busy <= v.dt {
		return
	}
	stillBound(tc, v, float64(tc.moveLag)/busy, busy, tc.spanProduced)
}

// stillBound takes bound, an upper bound of what a consumer whose position
// stood still consumed over the busy seconds it has been working on what
// it holds (produced: the messages written meanwhile), as the interval's
// reading once it is below the capacity estimate; with no estimate, once
// the consumer has been busy longer than the budget.
func stillBound(tc *control, v *reading, bound, busy, produced float64) {
	if (tc.capacity > 0 && bound >= tc.capacity) || (tc.capacity <= 0 && busy <= v.budget) {
		return
	}
	v.consumed, v.span, v.measured = bound, busy, true
	v.spanProduced = produced
	v.keepsUp = v.consumed*busy >= keepUpRatio*v.spanProduced
}

// heldBound is the most the consumer of st can consume, messages per
// second, by what its reports say it holds: a consumer that holds Held
// records and has finished none of them for HeldFor (since its poll or
// its last finished record) consumes fewer than Held in HeldFor. The
// records of one report share one HeldFor (one poll): their counts add
// up; reports of members with their own polls add up as bounds. busy is
// the longest HeldFor, seconds. ok only when every partition with lag is
// read from a fresh report with work in hand and a count (an older
// reporter, a NATS consumer of several members, an idle member: no
// bound), and each report held its records for some time.
func heldBound(st *lag.State) (bound, busy float64, ok bool) {
	type poll struct {
		since time.Time
		held  int64
		busy  time.Duration
	}
	var polls []poll
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag <= 0 {
			continue
		}
		r := ps.Reported
		if ps.Source != lag.SourceConsumer || r.HeadTime.IsZero() || r.Held <= 0 || r.HeldFor <= 0 {
			return 0, 0, false
		}
		since := r.At.Add(-r.HeldFor)
		if j := slices.IndexFunc(polls, func(p poll) bool { return p.since.Equal(since) }); j >= 0 {
			polls[j].held += r.Held
			continue
		}
		polls = append(polls, poll{since, r.Held, r.HeldFor})
	}
	for _, p := range polls {
		bound += float64(p.held) / p.busy.Seconds()
		busy = max(busy, p.busy.Seconds())
	}
	return bound, busy, len(polls) > 0
}

// lastMove is when st's position last moved, as far as st says: the
// newest commit lag/ saw move (PartitionState.LastCommit) of a position
// read from commits, or when a position without a commit was first seen
// (it never moves; State.Uncertainty is the time since); st.At when
// neither is known.
func lastMove(st *lag.State) time.Time {
	if st.Source == lag.SourceFirstSight {
		return st.At.Add(-st.Uncertainty)
	}
	var newest time.Time
	for i := range st.Partitions {
		if lc := st.Partitions[i].LastCommit; lc.After(newest) {
			newest = lc
		}
	}
	if newest.IsZero() || newest.After(st.At) {
		return st.At
	}
	return newest
}

// leaveOutLate takes the partitions producers avoid (v.avoid) out of the
// target's figures: their lag out of the lag (a new message waits on the
// other partitions), what was written to them out of the produce rate, and
// what their consumer drained out of the consume rate, so that the
// capacity, "keeps up" and the rate the law sets are those of the other
// partitions. Keyless producers write around an avoided partition, and the
// SDK refuses keyed records bound for it; whatever still reaches it (plain
// producers) must not make the topic look unable to keep up, or slow-down
// would refuse producers on every partition for one.
//
// An avoided partition's consumption is what its position moved in the
// interval, counted as the target's consumption is (see consumption: the
// messages consumed in the interval over the span measured), so that the
// difference is what the other partitions consumed. Less what its
// consumer skipped where that is counted (PartitionState.Skipped): those
// are out of v.consumed already (leaveOutSkipped), and the skips of a
// late partition, whose head is past the deadline, are most of its move.
// Taken out twice, the other partitions read as consuming their own work
// less the late one's skips: a Kafka consumer behind the ttl guard read
// 36 msg/s for 123, was drained, and once caught up the probe climbed
// from it x1.5 a second, 0, 45, 67, 101 ... msg/s (a lagbridge demo run
// whose grant locked for 10 s, TestControllerLateSkipsOnce). Not the rate its
// consumer was seen to drain it at under a backlog: that is what it can
// do, not what it did, and a partition listed for a moment (a healthy one
// given a whole batch by a sticky partitioner, which it drains at 2,000
// msg/s) took that rate out of a topic that consumed a few hundred: the
// others read as consuming nothing, the topic as saturated at a few
// messages a second (lagbridge bench --hot-partition at 250 ms on real
// Kafka: "saturated: capacity 3/s", refusing every partition).
func leaveOutLate(tc *control, v *reading) {
	var in, out float64
	for _, id := range v.avoid {
		pt := tc.parts[id]
		v.lateLag += float64(pt.lag)
		in += pt.in
		out += pt.out
	}
	v.lag = max(v.lag-v.lateLag, 0)
	v.produced = max(v.produced-in, 0)
	if !v.measured || (in == 0 && out == 0) {
		return
	}
	if v.span > 0 {
		before := v.consumed
		v.consumed = max(v.consumed-out*v.dt/v.span, 0)
		v.lateOut = before - v.consumed
	}
	v.spanProduced = max(v.spanProduced-in*v.span, 0)
	v.keepsUp = v.consumed*v.span >= keepUpRatio*v.spanProduced
}

// lateShareBack returns the capacity estimate cInst of v, taken back to
// what the whole consumer did at a reading that lowered the estimate on
// the avoided partitions' share alone (tc.lateWork), at the first measured
// reading after it that shows the consumer caught up (no lag, or its head
// within E/2) and takes nothing out for avoided partitions. A measured
// reading with work queued between them (queuedReading) bounds it by what
// the whole consumer did: what it consumed, with the avoided partitions'
// drain when it took one out without lowering the estimate by a step
// (a hot partition listed until the consumer catches up: bounded only by
// readings with nothing taken out, a save across the demo's drop to 400
// msg/s came back as 1,305; TestControllerLateShareBackQueuedLateBounds). For
// positions the consumer reports (lag.SourceConsumer), which move as it
// works; a move read from commits holds several intervals' work, not the
// loop's time in one.
//
// Why: one consumer works every partition in one loop (the hook's poll,
// franz-go's default), so an interval it spent on a late partition's
// records is one the others waited in. leaveOutLate takes that drain out
// of the consumption (right for the law at that reading: the others' wait
// is at what they got), and the reading lowers the estimate to the
// others' share: 142 msg/s of the 395 the consumer did, with two late
// partitions taking 253 (lagbridge demo, the Kafka consumer behind the
// hook and the ttl guard, 5 s auto-commit; TestControllerLateShareBack;
// through the skip-burst hold, 62 msg/s of 402, TestControllerLateShareHeldBack).
// Once the late records were drained or skipped the others get it all
// again, but nothing shows it: a caught-up reading measures what the
// producers were allowed, never more than the estimate, and a queued one
// whose head was past MaxAge is held as a skip burst. The probe then
// climbed from the share, x1.5 a second from tens of msg/s (a lock).
// What the consumer did at that reading, less what it skipped, is work:
// a lower bound of its capacity, bounded by the estimate before it.
func lateShareBack(tc *control, st *lag.State, v *reading, cInst, step float64) float64 {
	switch {
	case st.Source != lag.SourceConsumer:
		tc.lateWork = 0
	case v.lateOut > 0:
		if cInst < (1-step)*tc.capacity {
			tc.lateWork = max(tc.lateWork, min(v.consumed+v.lateOut, tc.capacity))
		} else if tc.lateWork > 0 && queuedReading(v) {
			tc.lateWork = min(tc.lateWork, v.consumed+v.lateOut)
		}
	case tc.lateWork <= 0:
	case queuedReading(v):
		tc.lateWork = min(tc.lateWork, v.consumed)
	default:
		cInst, tc.lateWork = max(cInst, tc.lateWork), 0
	}
	return cInst
}

// leaveOutSkipped takes the messages the consumer terminated as expired
// in the interval (State.SkipRateInstant: the ttl guard's skips, which
// the NATS observer counts from the server's advisories) out of
// v.consumed, as leaveOutLate takes out a listed partition's: a skip
// costs the consumer nothing, so it measures no capacity, and the
// capacity estimate, the rise it may take (see estimateCapacity) and
// every rule that reads the consumption read the work done. A consumer
// behind the guard, drained at a drop to 1,690 messages with its head at
// 1.94 s of a 2 s deadline, skipped most of them in the next second:
// read as consumption, 1,688 msg/s estimated a consumer of 400 at 1,679
// msg/s, the probe admitted 2,519 msg/s, and the slow phase cycled
// drain, probe, saturated, drain (lagbridge demo's NATS consumer,
// TestControllerSkipsNotCapacity). Where nobody counts the skips (Kafka,
// a server that drops the term's reason), the skip-burst hold in
// estimateCapacity is the fallback.
//
// It runs where the consumption is read, before twoMoves saves the move
// for the next reading's average: taken out after, the burst came back
// one reading later as half of a two-move average (decision 11 of
// TestControllerSkipsNotCapacity probed from 1,244 msg/s, capacity 1,040,
// and drained at the next).
func leaveOutSkipped(st *lag.State, v *reading) {
	skip := min(st.SkipRateInstant, st.ConsumeRateInstant)
	if skip <= 0 || v.span <= 0 {
		return
	}
	v.consumed = max(v.consumed-skip*v.dt/v.span, 0)
}

// othersHead is the head age of st's partitions that are not in avoid,
// seconds: st.HeadAge with none. The head of a partition producers write
// around is its own lateness, not a wait of the topic's (see
// leaveOutLate): taken as the topic's, one late partition's head froze
// the capacity estimate (see estimateCapacity) and made every reading of
// commits as often as observations a queue (see consumption).
func othersHead(st *lag.State, avoid []int32) float64 {
	if len(avoid) == 0 {
		return st.HeadAge.Seconds()
	}
	var head time.Duration
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag > 0 && !slices.Contains(avoid, ps.Partition) {
			head = max(head, ps.HeadAge)
		}
	}
	return head.Seconds()
}

// idleReported reports whether every partition of st with lag has its
// position from a consumer's fresh report that had nothing in hand.
func idleReported(st *lag.State) bool {
	if st.Source != lag.SourceConsumer || st.Uncertainty <= 0 {
		return false
	}
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag > 0 && (ps.Source != lag.SourceConsumer || !ps.Reported.HeadTime.IsZero()) {
			return false
		}
	}
	return true
}

// idleAtReport reports whether st reads a consumer's reports that had
// nothing in hand on every partition with lag (idleReported), with a head
// no older than the report and E/2 (lag/ dates a record that came after
// an idle report at the report), and a lag no more than was produced over
// the report's age and E/2: every record it holds was written after it
// said it had nothing to do, so no queue can have formed, and its consume
// reading is what it was given, a lower bound of its capacity (with none
// yet, the rate produced is). A consumer whose capacity fell has work in
// hand when it reports. Read as its capacity, the first fresh reading of a
// new group reporting through the hook at 250 ms (its idle reports 0.2 s
// old: 159 msg/s consumed of 795 produced, lag 160, all written since the
// report) limited it: "saturated: capacity 159/s, wait 807ms", and later
// idle reports held it for 3-4 s (lagbridge bench, kafka/hook/sync/250ms
// on kfake; TestControllerIdleReportNotAQueue).
func idleAtReport(st *lag.State, v *reading) bool {
	return idleReported(st) && writtenSince(v, 0, v.since)
}

// writtenSince reports whether v holds only records written over the
// last t seconds, within E/2: its head (at the commit or report) no older
// than head and E/2, and its lag no more than was produced over t and E/2
// (see idleAtReport, idleAtSight).
func writtenSince(v *reading, head, t float64) bool {
	return v.headKnown && v.headAge <= head+v.engageWait/2 && v.lag <= (t+v.engageWait/2)*v.produced
}

// fromCommits reports whether st's position is the committed one.
func fromCommits(st *lag.State) bool { return st.Source == "" || st.Source == lag.SourceCommits }
