package quota

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// lateParts returns the partitions producers should avoid: those with lag
// whose head is older than MaxAge, or whose predicted wait (lag over the
// partition's own consume rate since its previous move; unknown while a
// position read from commits has not moved and its commit is not overdue,
// see partCadence; for a still position from the consumer's reports, see
// reportedWait, and one that moved is listed by its head only, see
// polledWait; plus, while more is written to it than it drains, the
// growth of its wait over one more interval, until the next decision
// takes effect; on first sight, lag over its share of the target's
// consume rate) reaches the budget
// while the head is past the setpoint's share of the budget (s·L; 0.5 s
// of a 2 s budget, see lateHead). The list is returned only while
// it holds fewer than AvoidBelow of the partitions (and there are at least
// two), and some partition not listed was written to since the last
// observation: "a few lag, most are fine", and the producers write to the
// others; fewBad reports that. (Producers that write to the late
// partitions only, keyed records, would have their lag left out of the
// wait for good.)
//
// Once listed, a partition stays listed (hysteresis: a partition freed at
// its first empty sample is refilled at once by producers' sticky
// partitioners, by a whole batch) until it was comfortably inside the
// deadline (no backlog, or its head and wait within the target wait) for
// avoidCalm observations in a row, and, when the rate its consumer was
// seen to drain it at while it left work behind (its capacity) is below
// the share of the produce rate it would get back, for avoidProbe
// seconds (a trial; twice as long after each trial it failed, up to
// maxProbe). knownSlow lists a partition that drains less
// than half its share: the band between is hysteresis (at 250 ms the rate
// of a 20 msg/s consumer is read from 5 records, give or take one, and
// one read just over half its share freed it, at once listed again:
// TestSimHotPartitionTrialsBackOff). lateSoon lists a partition reported
// at its own pace a reading early, when its wait and one more interval
// reach the budget.
//
// Head ages are taken at the commit (less v.since), as for the target.
func (c *Controller) lateParts(tc *control, st *lag.State, p *Policy, v *reading) (late []int32, fewBad bool) {
	dt, havePrev := partsSpan(tc, st, v)
	budget := p.Budget().Seconds()
	// A partition whose oldest message waited less than the setpoint's
	// share of the budget is not late, whatever its predicted wait says:
	// a healthy partition read through commits every few hundred
	// milliseconds shows that much lag, and a rate measured over a span
	// it was mostly idle in is its producers', not its consumer's; unless
	// its consumer's own rate is known and says so (see knownSlow).
	lateHead := c.cfg.Setpoint * budget
	if tc.parts == nil {
		tc.parts = make(map[int32]partTrack, len(st.Partitions))
	}
	listed := 0
	for _, pt := range tc.parts {
		if pt.late {
			listed++
		}
	}
	// The shares a freed partition gets, and (of the offer) an unlisted one.
	share := v.produced / float64(max(len(st.Partitions)-listed+1, 1))
	offerShare := max(v.produced, st.ProduceRate) / float64(max(len(st.Partitions)-listed, 1))
	tc.gen++
	othersKept, behind := keptUpSomewhere(tc, st), unlistedBehind(tc, st, v, lateHead)
	v.rise = sharedRise(tc, st, v, dt)
	drained, drains := partDrains(tc, st, dt)
	others := false // a partition not late was written to
	for _, ps := range st.Partitions {
		pt, had := tc.parts[ps.Partition]
		head := max(ps.HeadAge.Seconds()-v.since, 0)
		next := trackPart(pt, had, &ps, st, dt)
		next.gen = tc.gen
		next.slowed = had && !ps.Stale && slowAlone(next, drained, drains)
		wait, loop := partWait(pt, next, had, havePrev, &ps, st, v)
		// A wait that is the poll loop's (loop) is the target's business:
		// it lists no partition (see polledWait).
		isLate := ps.Lag > 0 && (head > p.MaxAge.Seconds() || (wait >= budget && head > lateHead && !loop))
		isLate = isLate || (!loop && had && othersKept && knownSlow(pt, next, head, partCadence(&ps, v), budget, fedShare(pt, next, &ps, offerShare, drained, drains)))
		isLate = isLate || (!loop && had && othersKept && behind == 1 && lateSoon(pt, next, &ps, wait, head, lateHead, budget, c.cfg.Interval.Seconds()))
		if (v.shadow || v.rise) && !pt.late && head <= p.MaxAge.Seconds() {
			// A stall the observer shared, or one every partition's
			// head shows, lists no partition by its wait: the listed
			// ones stand (see observerStall, sharedRise).
			isLate = false
		}
		if v.rise && !pt.late {
			next.rate, next.full = pt.rate, pt.full // nothing learned
		}
		next.capSeen = next.capSeen || next.full
		if (isLate || pt.late) && next.rate <= 0 && ps.Lag > 0 && ps.CommitRate > 0 && !math.IsInf(ps.CommitRate, 0) {
			// Not measured here yet: what the tracker measured from its
			// commits while it had a backlog.
			next.rate = ps.CommitRate
		}
		isLate = keepLate(tc, pt, &next, had, &ps, st, v, isLate, head, wait, share, dt)
		tc.parts[ps.Partition] = next
		if isLate {
			late = append(late, ps.Partition)
		} else if !had || ps.End > pt.pos+pt.lag || next.inAvg >= 1 {
			// Written to since the last observation, or at a message a
			// second or more over about the last second (observed every
			// 250 ms, a topic slowed to a trickle has intervals without
			// a write, and dropping the list then put the late
			// partition's backlog back in the topic's wait), or first
			// seen (no evidence against it): producers do write around
			// the late partitions.
			others = true
		}
	}
	pruneParts(tc, len(st.Partitions))
	n := len(st.Partitions)
	if n < 2 || len(late) == 0 || !others || float64(len(late)) >= c.cfg.AvoidBelow*float64(n) {
		return nil, false
	}
	slices.Sort(late)
	return late, true
}

// keepLate sets a partition's keyless rate (partLimit) and hysteresis
// (holdLate) after an observation that judged it isLate (or not) now, in
// next, and returns whether it stays listed. Between its commits (see
// betweenCommits), a partition producers avoid (listed at the last
// decision) shows nothing new: its hold and its rate stand, and the
// rate's growth at its next commit counts the time since the last one;
// what its rate adds beyond its drain is spread over its commit cadence
// (see partLimit). A partition listed now reads its listing's rate
// (listedRate) for these only; the rate it keeps is the one known.
func keepLate(tc *control, pt partTrack, next *partTrack, had bool, ps *lag.PartitionState, st *lag.State, v *reading, isLate bool, head, wait, share, dt float64) bool {
	known := next.rate
	if isLate && !pt.late {
		// Listed now: its keyless rate and hold read the drain its
		// wait was read over (listedRate); the rate it keeps is known.
		next.rate = listedRate(pt, *next, ps, st)
	}
	avoided := slices.Contains(tc.last.AvoidPartitions, ps.Partition)
	between := avoided && betweenCommits(pt, had, ps, dt)
	span := dt
	if !pt.freshAt.IsZero() {
		span = st.At.Sub(pt.freshAt).Seconds()
	}
	if !between {
		next.freshAt = st.At
	}
	h := 1.0
	if avoided {
		h = max(commitCadence(ps, dt), 1)
	}
	next.limit = partLimit(pt, *next, partBacklog(ps, next.rate, st.At, v), v.setWait, span, h, between)
	isLate = holdLate(pt, next, isLate, between, ps.Lag, head, wait, v.setWait, share, dt)
	if !isLate {
		next.limit = 0
	}
	next.rate = known
	return isLate
}

// sharedRise reports whether st shows a stall of the whole consumer while
// some partition is listed (at the last decision): the interval measured
// a commit (v.measured), and every partition not listed has lag, a known
// head older than at the observation before (0 if it had no lag then)
// but not past half the budget, and drained less than half the rate its
// consumer was seen to drain it at (a saturated consumer drains at its
// rate; a stalled one does not). A loaded machine stalls the consumer of
// every partition at once, the observer on time (no observerStall's
// shadow): each healthy partition's head rose with the clock while its
// consumer drained 1-14 records (at most 0.41 of its rate seen before),
// which read as a wait over the budget or a slow drain (knownSlow), at
// once or from the rate learned there, and listed one to five healthy
// partitions beside the slow one. With half the partitions listed or
// more the list was dropped (AvoidBelow), and the hysteresis held the
// healthy ones listed for seconds after the stall (lagbridge bench
// --hot-partition on real Kafka 4.3.1 at load 11-15: the topic drained,
// saturated, stepped down or probed in 8-49 decisions of a run;
// TestControllerSharedRiseKeepsList). Such a reading lists no partition
// by its wait or its drain (one whose head is past MaxAge is) and teaches
// no partition not listed a consume rate: the listed partitions stand on
// their own evidence, and what every partition shows is the topic's law's
// to read, as it is (a stall of the consumer is believed at once, see
// observerStall). A first form also held the topic's law (capacity kept,
// the rate in force kept) until those heads passed half the budget: a
// real drop of the whole consumer's capacity while a partition was listed
// was then believed only once a new message would be dead on arrival (at
// 250 ms, 15 msg/s a partition: limited 1 s later than without the rule,
// 244 messages dead in 10 s against 0; TestControllerSharedRiseDropBelieved).
// A whole consumer that keeps slowing lists its partitions by their wait
// once their heads pass half the budget.
func sharedRise(tc *control, st *lag.State, v *reading, dt float64) bool {
	if len(tc.last.AvoidPartitions) == 0 || dt <= 0 || !v.measured {
		return false
	}
	others := false
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		pt, had := tc.parts[ps.Partition]
		drained := float64(ps.End-ps.Lag-pt.pos) / dt
		switch h := ps.HeadAge.Seconds(); {
		case !had:
			return false
		case slices.Contains(tc.last.AvoidPartitions, ps.Partition):
		case ps.Stale || !ps.HeadKnown || ps.Lag <= 0 || h <= pt.head || h > v.budget/2 || drained >= pt.rate/2:
			return false
		default:
			others = true
		}
	}
	return others
}

// partsSpan is the span, seconds, the partitions' rates of st are
// measured over, and whether an earlier reading of them is at hand: the
// interval, or for the first fresh decision the span since the
// partitions were recorded at the reading before it (see sightParts),
// which it consumes.
func partsSpan(tc *control, st *lag.State, v *reading) (dt float64, havePrev bool) {
	dt, havePrev = v.dt, tc.has
	if !tc.has && !tc.partsAt.IsZero() && st.At.After(tc.partsAt) {
		dt, havePrev = st.At.Sub(tc.partsAt).Seconds(), true
	}
	tc.partsAt = time.Time{}
	return dt, havePrev
}

// pruneParts forgets the partitions the reading of generation tc.gen did
// not show (it showed n).
func pruneParts(tc *control, n int) {
	if len(tc.parts) <= n {
		return
	}
	for id, pt := range tc.parts {
		if pt.gen != tc.gen {
			delete(tc.parts, id)
		}
	}
}

// knownSlow reports whether a partition is late by its own drain whatever
// its head says against lateHead (see lateParts): its consumer's rate was
// measured between two moves that left work behind (next.full: its
// capacity, not the rate its producers fed it), the work it holds now was
// there in part at the last observation (its position is short of that
// observation's end), and at that rate either it holds the budget or more,
// or it drains less than half the share of the produce rate it gets
// (share, of the producers' offer; for one reported at its own pace and
// fed less, see fedShare) while its head is older than its commit cadence
// (cad: what a healthy partition read through commits shows): keyless
// producers write to it faster than it drains, and its backlog can only
// grow. The caller
// checks that the consumer kept up on some other partition (see
// keptUpSomewhere): a stall of the whole consumer leaves every partition's
// work behind, and is the target's business. At 250 ms on kfake a
// partition whose consumer slowed to 20 msg/s drained 5 of its 29 records
// (24 left, 1.2 s of its work, head 0.61 s, a share of 50 msg/s): under
// the head gate's wait test it stayed unlisted until the sticky
// partitioner's next run put 30 more on it (lagbridge bench
// --hot-partition; TestControllerSlowPartitionListedByItsDrain).
func knownSlow(pt, next partTrack, head, cad, budget, share float64) bool {
	if next.lag <= 0 || pt.lag <= 0 || next.pos >= pt.pos+pt.lag || !next.full || next.rate <= 0 {
		return false
	}
	return float64(next.lag)/next.rate >= budget || (next.rate < share/2 && head > cad)
}

// fedShare is the share knownSlow holds a partition's drain against:
// share, the offer split evenly over the partitions not listed; but for a
// partition reported at its own pace (ownPace), not listed, that is fed
// less than that (fed: over the last interval, or smoothed if more; a
// trial's feed shows at once), its feed, and only while it slowed alone
// (slowAlone) at this reading and the one before; else its drain lists it
// not (0). A short pool drains each partition about in proportion to its
// feed: fed 3-5% of the offer (one pool of 240 msg/s offered 480, at
// 250 ms), a partition drained under half the even share and was listed
// 106-120 times at heads of 0-250 ms; and a trickle's drain is read from a
// record or two: fed 7% of a pool of 120 msg/s, one record drained of the
// two fed read as half its feed, and slowed alone at that one reading it
// was listed 120 times (TestControllerOwnPacePoolFedLittleNotListed). A slow worker fed little
// beside a pool drains, for its feed, under half what the others drain for
// theirs (TestControllerOwnPaceSlowWorkerFedLittleListed). A listed
// partition is fed what producers were steered to give it, no evidence of
// its consumer: held against its share, as before. Fed little means
// fed less than the partitions' mean feed too (sum over n, see
// partDrains), not only less than the offer's even share: the feed is
// read under the limit in force, so under a cut every partition is fed
// less than the offer's share, and a slow worker fed its share of the cut
// went unlisted while its lag held the topic's cut in force (12 msg/s of
// a share of 100 under a cut to 60: never listed in 8 readings;
// TestControllerOwnPaceCutSlowWorkerListed).
func fedShare(pt, next partTrack, ps *lag.PartitionState, share float64, sum drains, n int) float64 {
	fed := max(next.in, next.inAvg)
	if pt.late || ps.Source != lag.SourceConsumer || !ps.Reported.OwnPace || fed >= share || n < 2 || fed*float64(n) >= sum.in {
		return share
	}
	if !(pt.slowed && next.slowed) {
		return 0
	}
	return fed
}

// keptUpSomewhere reports whether, on some partition that had lag at the
// previous observation, the consumer's position has passed that
// observation's end since: it kept up there.
func keptUpSomewhere(tc *control, st *lag.State) bool {
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if pt, had := tc.parts[ps.Partition]; had && pt.lag > 0 && !ps.Stale && ps.End-ps.Lag >= pt.pos+pt.lag {
			return true
		}
	}
	return false
}

// trackPart is a partition's record after this observation: its position
// and lag, the rate its consumer drained it at between its last two moves
// while it had a backlog, and what was written to it (in) and drained
// (out) over the last interval.
func trackPart(pt partTrack, had bool, ps *lag.PartitionState, st *lag.State, dt float64) partTrack {
	pos := ps.End - ps.Lag
	next := partTrack{full: pt.full, capSeen: pt.capSeen, committed: ps.Committed, freshAt: pt.freshAt, pos: pos, lag: ps.Lag, rate: pt.rate, movePos: pt.movePos, moveAt: pt.moveAt, moveLag: pt.moveLag, probe: pt.probe, limit: pt.limit, head: ps.HeadAge.Seconds()}
	switch {
	case ps.Source != lag.SourceConsumer || ps.Reported.HeadTime.IsZero() || ps.Lag <= 0:
		// Nothing in hand: the next poll comes after this observation.
	case had && pos == pt.pos && !pt.handAt.IsZero():
		next.handAt, next.handLag = pt.handAt, pt.handLag
	default:
		next.handAt, next.handLag = st.At, ps.Lag
	}
	switch {
	case !had || ps.Stale:
		next.movePos, next.moveAt, next.moveLag = pos, st.At, ps.Lag
	case pos != pt.movePos:
		// Moved: if it had a backlog all along, it drained at its
		// capacity since the last move. When it drained all the lag it
		// had at that move (with positions from commits, lag it had
		// consumed already), it may have run out of work: what it
		// drained is a lower bound of its capacity, which only raises
		// the rate known (fed a trickle, a slow consumer drains the
		// trickle, not its capacity).
		if pt.lag > 0 && ps.Lag > 0 && st.At.After(pt.moveAt) && !pt.moveAt.IsZero() {
			r := float64(pos-pt.movePos) / st.At.Sub(pt.moveAt).Seconds()
			next.full = true
			if pos-pt.movePos >= pt.moveLag {
				next.full = pt.full && pt.rate >= r
				r = max(r, pt.rate)
			}
			next.rate = r
		}
		next.movePos, next.moveAt, next.moveLag = pos, st.At, ps.Lag
	}
	if had && !ps.Stale && dt > 0 {
		next.in = float64(max(ps.End-(pt.pos+pt.lag), 0)) / dt
		next.out = float64(max(pos-pt.pos-ps.Skipped, 0)) / dt
	}
	next.inAvg = pt.inAvg + min(dt, 1)*(next.in-pt.inAvg)
	return next
}

// partWait is the predicted wait of a message written to the partition
// now, seconds (see lateParts); -1 when unknown, +Inf when its consumer
// is overdue. loop reports that it is the wait of the poll loop that
// drains all the target's partitions (see polledWait), not the
// partition's own.
func partWait(pt, next partTrack, had, havePrev bool, ps *lag.PartitionState, st *lag.State, v *reading) (wait float64, loop bool) {
	dt, pos := v.dt, ps.End-ps.Lag
	// polled: a position from the consumer's reports, of a target whose
	// consumption was measured: its wait is the poll loop's (see
	// polledWait) once it moved or is first seen, unless the reporter
	// finishes the partition's records at its own pace (ownPace: a worker
	// per partition) and the loop keeps up: its moves are then its own
	// drain. Workers that share one capacity (a pool, a pacer) say
	// ownPace too; while the loop is behind, each partition's drain is
	// its share of that capacity, and read as its own it listed healthy
	// partitions at heads of 0.4-1.3 s (TestControllerOwnPaceSharedPoolNotListed);
	// unless it slowed alone (see slowAlone) over this interval and the
	// one before: its drain is then its worker's.
	polled := ps.Source == lag.SourceConsumer && v.measured && v.consumed > 0 && (!ps.Reported.OwnPace || (polledWait(st, v) > v.setWait && !(pt.slowed && next.slowed)))
	wait = -1.0 // unknown
	if ps.Lag > 0 && had && havePrev && dt > 0 && !ps.Stale && !pt.moveAt.IsZero() {
		// Its consume rate over the span since its previous move: a
		// position read from commits moves only when the consumer
		// commits, so an interval without a move measures nothing
		// until its commit is overdue (as for the target, see
		// consumption).
		span, cad := st.At.Sub(pt.moveAt).Seconds(), partCadence(ps, v)
		switch {
		case pos != pt.movePos && polled:
			return polledWait(st, v), true
		case pos != pt.movePos && span > 0:
			drain := float64(pos-pt.movePos) / span
			wait = float64(ps.Lag) / drain
			if next.in > drain {
				// What is written to it beyond what it drains until
				// the next decision takes effect (one interval) waits
				// longer still.
				wait += (next.in/drain - 1) * dt
			}
		case ps.Source == lag.SourceConsumer:
			wait = reportedWait(pt, ps, st, v)
		case cad <= 0 || span > 1.5*cad+dt:
			wait = math.Inf(1)
		}
	} else if ps.Lag > 0 && !had && !ps.Stale {
		// First sight: its own rate is not known yet; take the rate
		// the tracker measured from its commits, else its share of the
		// target's. A partition that holds the target's backlog alone
		// is late at once, before the target's wait, made of its lag,
		// drains the whole topic for it.
		switch {
		case polled:
			return polledWait(st, v), true
		case ps.CommitRate > 0 && !math.IsInf(ps.CommitRate, 0):
			wait = float64(ps.Lag) / ps.CommitRate
		case v.measured && v.consumed > 0:
			wait = float64(ps.Lag) * float64(len(st.Partitions)) / v.consumed
		}
	}
	return wait, false
}

// polledWait is the wait of a new message on a partition whose position
// comes from the consumer's reports and moved (or is first seen),
// seconds: the target's lag over its consume rate. The hook reports a
// position as the poll hands records out (consumerclient), and the loop
// works through a poll's records before it polls again: a partition's
// records wait for the polls ahead of them, whichever partitions those
// hold, and the loop drains them all at one rate. A partition's own
// moves measure what its polls held, not what its consumer can do: read
// as its drain, a poll of 5 records over a second is 5 msg/s, and a
// trickle partition (or one a full poll left mostly out) with a lag of
// 12 read as a 2.4 s wait, listed late while the consumer kept up; its
// drain was then taken out of the target's (see leaveOutLate), and the
// quota locked near 0. The loop's wait is the target's business, for
// its law: it lists no partition (lateParts), and serves only to see a
// listed one comfortably inside the deadline again. Such a partition is
// listed when its exact head is past MaxAge; one that stands still with
// work in hand is read by reportedWait.
func polledWait(st *lag.State, v *reading) float64 {
	return float64(st.Lag) / v.consumed
}

// reportedWait is the predicted wait of a partition whose position, from
// the consumer's reports (lag.SourceConsumer), did not move while it has
// lag, seconds; -1 when unknown. The position moves once per poll, so it
// standing still is a poll in hand or a consumer waiting for records, not
// a consumer that stopped (read as one, the partition was listed late
// between two polls and its drain taken out of the target's, see
// leaveOutLate); its head age, from the record in hand, is exact and
// decides as it is. As for the target (see reportStill): the poll in hand
// was taken at or before the observation its position was first seen at
// (partTrack.handAt) and held at most the lag seen then, so the consumer
// drains it slower than that lag over the time since; the wait is the
// lag over that bound once it is below the rate the partition was seen
// to drain at (with no such rate, once the poll has lasted longer than
// the budget), else the lag over that rate, else unknown. A report with
// nothing in hand measures nothing: unknown.
func reportedWait(pt partTrack, ps *lag.PartitionState, st *lag.State, v *reading) float64 {
	if ps.Reported.HeadTime.IsZero() || pt.handAt.IsZero() || pt.handLag <= 0 {
		return -1
	}
	repAt := ps.Reported.At
	if repAt.IsZero() || repAt.After(st.At) {
		repAt = st.At
	}
	drain := pt.rate
	if busy := repAt.Sub(pt.handAt).Seconds(); busy > v.dt {
		bound := float64(pt.handLag) / busy
		if (drain > 0 && bound < drain) || (drain <= 0 && busy > v.budget) {
			drain = bound
		}
	}
	if drain <= 0 {
		return -1
	}
	return float64(ps.Lag) / drain
}

// holdLate applies the hysteresis and the trials of lateParts to a
// partition judged isLate (or not) now, recording them in next, and
// returns whether it stays listed. A listed partition is not freed at an
// observation between two of its commits (between, see betweenCommits):
// its calm observations count, and the release waits for a commit that
// shows it comfortable too.
func holdLate(pt partTrack, next *partTrack, isLate, between bool, lagMsgs int64, head, wait, setWait, share, dt float64) bool {
	probe := cmp.Or(pt.probe, avoidProbe)
	if pt.late && !isLate {
		comfortable := lagMsgs <= 0 || (head <= setWait && wait >= 0 && wait <= setWait)
		if comfortable {
			next.calm, next.calmFor = pt.calm+1, pt.calmFor+dt
		}
		// Slow: its consumer's rate, measured at least once while it
		// left work behind (its capacity, see knownSlow), is below the
		// share it would get back. A partition only ever seen draining
		// everything it was given shows its producers' rate
		// (TestControllerFirstSightHoldNotSlow).
		slow := next.capSeen && next.rate > 0 && next.rate < share
		isLate = next.calm < avoidCalm || (slow && next.calmFor < probe)
		if fedLimited(pt, *next) {
			// Fed at its rate, it shows a recovered consumer by itself:
			// listed until that rate reaches what it would get back.
			slow = false
			isLate = next.calm < avoidCalm || next.limit < share
		}
		isLate = isLate || between
		if !isLate && slow {
			next.trial = dt // tried again: watch it
		}
	}
	switch {
	case isLate && !pt.late && pt.trial > 0:
		// Late again soon after a trial: the next one waits longer.
		next.probe = min(2*probe, maxProbe)
	case !isLate && pt.trial > 0 && pt.trial < probeWatch:
		next.trial = pt.trial + dt
	case !isLate && pt.trial > 0:
		next.probe = 0 // it passed
	}
	next.late = isLate
	if !isLate {
		next.calm, next.calmFor, next.capSeen = 0, 0, false
	}
	return isLate
}

// partCadence is the commit cadence a partition's position is read with,
// seconds: its own learned one, else the target's (v.cadence); 0 for a
// position that moves whenever the consumer consumes (an estimate, a
// consumer's report).
func partCadence(ps *lag.PartitionState, v *reading) float64 {
	switch ps.Source {
	case "", lag.SourceCommits, lag.SourceFirstSight:
		if ci := ps.CommitInterval.Seconds(); ci > 0 {
			return ci
		}
		return v.cadence
	}
	return 0
}

// soonPace is the most of its known rate (pt.rate) a partition listed
// soon (lateSoon) drains at the reading: a healthy worker with 1.2-2x
// headroom that takes a sticky partitioner's burst drains at about its
// known rate, with more written than drained and its head past lateHead;
// without this, six producers sticky for 20 records on workers of 56-84
// msg/s, fed 50 each, listed 180 partition-entries over six 120 s runs
// where main before lateSoon listed none
// (TestControllerOwnPaceHealthyNotSoon). The replayed miss drained 28 of
// a known 58 msg/s (0.48). 0.6 is not tuned on the bench.
const soonPace = 0.6

// lateSoon reports whether a partition not late by its wait yet will be
// before the list made at the next reading can take effect: its wait and
// one more interval reach the budget (wait + interval >= budget) while
// its head is past lateHead. A list made at a reading reaches the
// producers only then: in the interval before it, a sticky partitioner's
// batches keep landing on the partition (more than it drains: in > out),
// and a drain measured over a span the consumer slowed inside overstates
// what it drains now (a worker at 20 msg/s read at 28 over the second it
// slowed in). Lagbridge bench --hot-partition --hot-commit 5s
// --hot-consumer hook on kfake at 1 s: partition 0 at lag 27, head 0.60
// s, wait 1.61 s was listed one reading later by its wait, at lag 47
// (2.35 s of its work): p99 2.00 s, 1.1% dead
// (TestControllerOwnPaceListedSoon). Only where the reading is exact and
// the partition's own (a position its consumer reports at its own pace,
// lag.SourceConsumer with OwnPace), its drain was measured at an earlier
// reading (pt.rate) and the drain just read is well below it (out at most
// soonPace of it: a change of pace, not a first sight), and the caller
// checks that it is the only partition not listed with its head past
// lateHead and that the consumer kept up elsewhere (othersKept): a
// consumer pool saturated as a whole, every partition behind, is the
// target's business: read with no regard to the others behind, the
// demo's hook recordings (as if at their own pace) listed 9 and 30
// partition-entries over the run instead of 5 and 17
// (TestControllerOwnPaceSoonNotPool).
func lateSoon(pt, next partTrack, ps *lag.PartitionState, wait, head, lateHead, budget, interval float64) bool {
	if ps.Lag <= 0 || ps.Source != lag.SourceConsumer || !ps.Reported.OwnPace || pt.rate <= 0 || next.in <= next.out || next.out > soonPace*pt.rate {
		return false
	}
	return wait >= 0 && head > lateHead && wait+interval >= budget
}

// unlistedBehind counts the partitions of st not listed (at the last
// observation) with lag whose head, at the commit, is past lateHead (see
// lateSoon).
func unlistedBehind(tc *control, st *lag.State, v *reading, lateHead float64) int {
	n := 0
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if ps.Lag > 0 && !tc.parts[ps.Partition].late && ps.HeadAge.Seconds()-v.since > lateHead {
			n++
		}
	}
	return n
}

// listedRate is the rate a partition listed now (not at the last
// observation) is taken to drain at, for its keyless rate (partLimit):
// the rate known, or the drain since its last move (over which its wait
// was read, see partWait) when that is lower. The rate known may be from
// before its consumer slowed, measured while it drained all it was fed:
// a worker slowed to 20 msg/s, listed on a drain of 28 read over the
// second it slowed in, was given the keyless rate of the 58 msg/s it
// drained before, its even share of 300 msg/s, and producers went on
// writing to it at that share until the next reading
// (TestControllerOwnPaceListedSoon). A drain read over a span the
// partition ran out of work in is what it was fed, below its capacity:
// its keyless rate then starts low and grows as its consumer keeps up
// (partLimit). The partition keeps its known rate (see keepLate): kept
// low, it held a recovered partition listed and relisted it at a share
// stuck low. A position that went back (a rewind) is no drain.
func listedRate(pt, next partTrack, ps *lag.PartitionState, st *lag.State) float64 {
	span := st.At.Sub(pt.moveAt).Seconds()
	pos := ps.End - ps.Lag
	if pt.moveAt.IsZero() || span <= 0 || pos <= pt.movePos || next.rate <= 0 {
		return next.rate
	}
	return min(next.rate, float64(pos-pt.movePos)/span)
}

// partDrains is what the consumer drained from the partitions of st seen
// at the last observation (not stale) over the interval dt, and what they
// were fed, msg/s in all, and how many partitions that is (see slowAlone).
func partDrains(tc *control, st *lag.State, dt float64) (sum drains, n int) {
	for i := range st.Partitions {
		ps := &st.Partitions[i]
		if pt, had := tc.parts[ps.Partition]; had && !ps.Stale && dt > 0 {
			next := trackPart(pt, had, ps, st, dt)
			sum.out += next.out
			sum.in += next.inAvg
			n++
		}
	}
	return sum, n
}

// drains: what partitions drained (out) and were fed (in), msg/s.
type drains struct{ out, in float64 }

// slowAlone reports whether a partition's consumer slowed on its own:
// over the interval it drained, for what it is fed (next.inAvg, about the
// last second), less than half what the others drained for what they are
// fed (sum over n partitions, its own included), and less than it is fed.
// A short pool drains each partition about in proportion to its feed: by
// the drains alone a partition fed 2% of the offer read as a slow worker
// (TestControllerOwnPacePoolFedLittleNotListed). partWait reads a
// partition so slowed at this reading and the one before by its own
// drain while the poll loop is behind: one slow worker among workers
// that keep up. At 250 ms the setpoint is one interval, about one hook
// report of what the healthy partitions are fed, so a slow worker's
// 18-28 records put the loop's wait over it; read as the loop's, a worker
// slowed to 20 msg/s, fed about 50, beside five that drained 44-55 msg/s
// on average at heads of 0.22-0.23 s, was listed only by its head past
// MaxAge (lagbridge bench --hot-partition --hot-commit 5s --hot-consumer
// hook --hot-interval 250ms on kfake: p0 p99 4.07 s, 9.0% dead;
// TestControllerOwnPaceSlowAloneListed). Workers that share a capacity
// drain about alike when it is short (the workers row at 2x: 53-74 msg/s
// each), and a pool's single intervals are lumpy (the demo's hook
// recordings: a partition drained 34 msg/s beside others' 222-948 at one
// interval, and 34 after 355 at another): read on one interval, or with
// no regard to the others' drain, the rule listed healthy partitions of a
// pool (TestControllerOwnPaceSoonNotPool,
// TestControllerOwnPaceSharedPoolNotListed).
func slowAlone(next partTrack, sum drains, n int) bool {
	out, in := sum.out-next.out, sum.in-next.inAvg
	if n < 2 || in <= 0 || out <= 0 {
		return false
	}
	return next.out*in < next.inAvg*out/2 && next.out < next.inAvg
}
