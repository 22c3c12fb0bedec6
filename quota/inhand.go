package quota

import (
	"fmt"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// pollOverdue caps the capacity a reading between the commits of a
// consumer that commits about once per observation (or more often) reads
// at, when the poll in hand is overdue at the capacity estimate.
//
// Such a consumer commits what a poll returned once it has processed
// the poll (commit per poll; franz-go's auto-commit commits the polls
// before the one in hand, on its timer). The poll in hand when its
// position was last seen to move holds at most the committed lag of that
// reading: it began after that commit with what was there, or, caught up
// then, with the first records written after it, which a fetch returns
// as they come (a few milliseconds' worth), before the reading that saw
// them as lag. No commit for busy seconds since is then a consumer that
// consumed fewer than that lag in busy seconds: pollLag/busy is the most
// it consumes. While that is at least
// the estimate less a step, nothing is known (a long poll of a consumer
// as fast as before); below it, the reading's wait and law are read at
// it, as the backlog extrapolated since the move at it (see backlog). The
// estimate itself is left as it is: the next commit measures the span.
//
// Why: commit per poll read every second holds the poll it fetched at
// 2,000 msg/s when its capacity falls to 400: no commit lands for
// seconds, the interval measures nothing, and the readings between went
// on at the capacity from before the drop, "saturated: capacity 1164/s,
// wait 739ms" with the committed lag 1,671 -> 3,191 and the head 1.39 ->
// 3.39 s, admitting 893 and 1,026 msg/s for a consumer of 400; the commit
// that ended the poll drained at 6.4 s of wait (lagbridge bench
// kafka/commit-per-poll/sync/1s at 10x on kfake; TestControllerPollOverdue).
// In another run the commit before the drop found the consumer caught up
// by the estimate between commits (lag 2,463 at the reading, 2,475
// produced in its interval), and the readings after it read "saturated:
// capacity 1976/s" at 1,603 and 1,789 msg/s with the head 1.99 and
// 2.99 s; the second now drains.
//
// Only where the bound cannot be a healthy long poll's: more than one and
// a half observations after the move, and the head at the committed
// position past the budget (a consumer of the estimate's capacity, held
// at its setpoint, starts each poll with a head within it).
//
// A timer's commit (auto-commit) lands at its first tick after the poll
// ended. A steady timer of the observation's period (franz-go's
// time.Ticker) ticks once in every interval, so two readings without a
// move are two ticks the poll outlasted, and the bound holds (but for a
// tick within its jitter of a reading); a timer whose ticks drift can
// tick once in two readings, and the bound then reads up to twice too
// low. The simulator's 1 s grid (±10% drift a commit), previous poll at
// 2x: 3 readings in 40 runs, in the slow phase, read 249-288/s for a
// consumer of 400 (the second tick after the move's 2.04-2.13 s after
// it, the poll ended 0.10-0.15 s after the one between); 2 of them
// drained where the reading had admitted 446 and 502 msg/s, and those
// runs refused 2 s more while idle after the restore (review-inhand).
// The same grid with the timer steady fires at no reading of 96 runs
// over 12 phases, with ±50 ms of jitter a tick at 1 of 104 (±20 ms:
// none). Commits cannot tell which consumer it is: one that commits each
// poll at 231/s commits the same offsets at the same readings as the
// grid's drifting timer at 400/s (seed 2), and a drifting timer at the
// old 1,164/s (ticks 1.10 and 0.93 s apart) those of the late run up to
// its fire (session 29, overdue1s).
func (c *Controller) pollOverdue(tc *control, st *lag.State, v *reading) {
	pos := committedPos(st)
	if pos != tc.pollPos || tc.pollAt.IsZero() {
		tc.pollPos, tc.pollAt, tc.pollLag = pos, st.At, st.CommittedLag
		return
	}
	busy := st.At.Sub(tc.pollAt).Seconds()
	if !pollPaced(st, v) || (v.measured && st.Source == lag.SourceCommits) || v.shadow ||
		v.capacity <= 0 || tc.pollLag <= 0 || busy <= 1.5*v.dt ||
		st.CommittedHeadAge.Seconds() <= v.budget {
		return
	}
	bound := float64(tc.pollLag) / busy
	if bound >= (1-c.cfg.StepThreshold)*v.capacity {
		return
	}
	v.overdueFrom, v.capacity, v.overdue = v.capacity, bound, true
}

// pollPaced reports whether st reads a consumer from its commits (or
// lag/'s estimate between them) at a learned cadence of at most one and
// a half observations: one whose poll in hand began at most about one
// observation before its position was seen to move (see pollOverdue).
func pollPaced(st *lag.State, v *reading) bool {
	return (st.Source == lag.SourceCommits || st.Source == lag.SourceEstimate) &&
		st.CommitInterval > 0 && st.CommitInterval.Seconds() <= 1.5*v.dt
}

// overdueReason is the reason of a saturated reading at the capacity of
// an overdue poll (see pollOverdue).
func overdueReason(tc *control, st *lag.State, v *reading) string {
	return fmt.Sprintf("saturated: %s (estimate %.0f/s), wait %s, target %s", overdueBound(tc, st, v), v.overdueFrom, secs(v.wait), secs(v.setWait))
}

// overdueNote is what a reading at the capacity of an overdue poll (see
// pollOverdue) adds to a reason that is not overdueReason (a drain): where
// its capacity came from; "" for any other reading.
func overdueNote(tc *control, st *lag.State, v *reading) string {
	if !v.overdue {
		return ""
	}
	return fmt.Sprintf(" (%s, estimate %.0f/s)", overdueBound(tc, st, v), v.overdueFrom)
}

// overdueBound says where an overdue poll's bound comes from: the time
// since the move, the poll in hand, the capacity it bounds.
func overdueBound(tc *control, st *lag.State, v *reading) string {
	return fmt.Sprintf("no commit for %s, the poll in hand at most %d messages: capacity at most %.0f/s",
		st.At.Sub(tc.pollAt).Round(time.Millisecond), tc.pollLag, v.capacity)
}
