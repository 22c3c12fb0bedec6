package quota

import (
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// reopened is what a consumer showed at the commit that re-opened its
// producers after they were held at 0 (a step down's pause, kept or not,
// or a drain): the capacity estimate then (base, msg/s; 0: none), and the
// newest commit before it (at) with the sum of the committed offsets then
// (pos), moved on by reopenSpan; while held, kept: the hold kept a step
// down's pause, and at, pos: the newest commit.
type reopened struct {
	kept bool
	base float64
	at   time.Time
	pos  int64
}

// reopenCap is the highest rate a probe may reach on a reading estimated
// between commits (v.estimated) after a commit re-opened producers held at
// 0: one probe step above what the consumer showed then (tc.reopen.base);
// 0 for no cap.
//
// Why: the commit that ends a pause or a drain of a consumer that commits
// per poll covers the backlog it took in one poll, so lag/'s estimate
// between commits moves its position at the rate of that span (thousands
// of msg/s) up to the end offset, and the readings until the next commits
// read caught up, consuming what was produced, whatever the consumer
// does. The probe took them as spare capacity and climbed x1.5 a reading
// from the law's re-open, 446 -> 704 -> 1,056 msg/s, for a consumer whose
// commits showed 312-376 msg/s (lagbridge bench,
// kafka/commit-per-poll/sync/250ms at 10x on kfake: a kept pause, a drain,
// then "caught up: probing from X/s" and "saturated: capacity 376/s";
// TestControllerReopenProbeCapped). The cap holds until the commits show
// more (see reopenSpan), the re-opening commit's own span included: a
// capacity that came back (the restore, also during the hold) climbs as
// before.
func reopenCap(tc *control, v *reading) float64 {
	if tc.reopen.base <= 0 || !v.estimated {
		return 0
	}
	return tc.reopen.base * (1 + v.probe)
}

// reopenSpan lifts tc.reopen once the commits since the re-open show the
// consumer consumed, over at least half an interval from one commit to a
// later one, more than StepThreshold above tc.reopen.base, or at least
// keepUpRatio of the cap where the probe step is smaller than that (a
// consumer that takes everything the cap admits could never show more
// than the cap): it has more than it showed (its capacity came back, or
// the cap is binding it), and the probe is its own again. Before the
// regime of the reading.
func (c *Controller) reopenSpan(tc *control, st *lag.State, v *reading) {
	newest := lastMove(st)
	if tc.reopen.base <= 0 || !newest.After(tc.reopen.at) {
		return
	}
	span, pos := newest.Sub(tc.reopen.at).Seconds(), committedPos(st)
	switch {
	case pos < tc.reopen.pos:
		tc.reopen.at, tc.reopen.pos = newest, pos
	case span < v.dt/2:
	case float64(pos-tc.reopen.pos)/span > min(1+c.cfg.StepThreshold, keepUpRatio*(1+max(v.probe, 0)))*tc.reopen.base:
		tc.reopen = reopened{}
	default:
		tc.reopen.at, tc.reopen.pos = newest, pos
	}
}

// noteReopen sets tc.reopen when this reading (a commit) re-opened
// producers held at 0 before it (held) by a hold in which a step down's
// pause was kept (keptPause: nothing committed since), and forgets it once
// the target is unlimited, or re-opened after a hold that kept no pause.
// After the regime of the reading.
func noteReopen(tc *control, st *lag.State, v *reading, held bool) {
	switch {
	case !tc.limited:
		tc.reopen = reopened{}
	case tc.rate <= 0:
		// The newest commit while held: the re-opening commit's span
		// starts there, and reopenSpan judges it too. The capacity
		// estimate is frozen through a hold: a drain that read still at
		// 15.75 s and re-opened at 36.5 s, past the restore, armed the cap
		// on 87/s for a consumer back at 2,000/s, and held it at 131/s
		// until the next commit (TestControllerReopenCapLiftsAfterRestore).
		tc.reopen = reopened{kept: held && tc.reopen.kept || v.stillHead, at: lastMove(st), pos: committedPos(st)}
	case held && tc.reopen.kept && v.measured && v.capacity > 0:
		tc.reopen = reopened{base: v.capacity, at: tc.reopen.at, pos: tc.reopen.pos}
	case held:
		tc.reopen = reopened{}
	}
}
