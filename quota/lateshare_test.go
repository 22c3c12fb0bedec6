package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// lateShareSteps runs lateShareBack over readings in order, each taken
// as its own capacity estimate (the consumption it shows), the result
// saved as the estimate as estimateCapacity would, and returns the last
// reading's estimate.
func lateShareSteps(tc *control, readings ...*reading) float64 {
	st := &lag.State{Source: lag.SourceConsumer}
	var got float64
	for _, v := range readings {
		v.engageWait = 0.4
		got = lateShareBack(tc, st, v, v.consumed, 0.25)
		tc.capacity = got
	}
	return got
}

// A late reading straddling a real drop (the demo's 2,000 -> 400 msg/s)
// saves what the whole consumer did across the drop (1,305 msg/s in
// pairs2/r1 of demolock's traces). Queued readings after it that still
// take a late partition's drain out (a hot partition that stays listed
// until the consumer catches up) show the whole consumer at 400 msg/s:
// they bound the saved rate as a queued reading with nothing taken out
// does. Before, only the latter did, and the first caught-up reading
// restored 1,305 msg/s for a consumer of 400.
func TestControllerLateShareBackQueuedLateBounds(t *testing.T) {
	tc := &control{capacity: 1690}
	readings := []*reading{{consumed: 1035, lateOut: 270, lag: 500, headKnown: true, headAge: 1.5}}
	for range 3 {
		readings = append(readings, &reading{consumed: 250, lateOut: 150, lag: 400, headKnown: true, headAge: 1.2})
	}
	readings = append(readings, &reading{consumed: 300, headKnown: true})
	if got := lateShareSteps(tc, readings...); got != 400 {
		t.Errorf("restored %.0f msg/s, want 400: the whole consumer's at the queued readings since the drop", got)
	}
}

// The edges, each from a late reading that saved the whole consumer
// (142 of 395 msg/s, estimate 538 before it) unless said:
//   - its "drain" an uncounted skip burst (an older hook, retention) of
//     3,000 msg/s: what comes back is at most the estimate before it;
//   - an estimate lowered by less than a step (380 of 400: the others
//     kept their pace) saves nothing: the caught-up reading reads 300;
//   - a second late reading lowering it by a step again: its whole
//     consumer (350) is capped by the estimate the first lowered (142) and
//     must not replace the first's 395;
//   - the caught-up reading gives back the larger of what it measured and
//     what was saved (450, not 395);
//   - queued or caught up: lag with the head past E/2 (or unknown) is work
//     queued and bounds the saved 395 by what was consumed (200); lag with
//     the head within E/2 is caught up and gives it back; a late reading
//     with nothing queued measures what the producers were allowed, not
//     the consumer: it bounds nothing.
func TestControllerLateShareBackEdges(t *testing.T) {
	late := reading{consumed: 142, lateOut: 253, lag: 400, headKnown: true, headAge: 1.5}
	caughtUp := reading{consumed: 100, headKnown: true}
	with := func(v reading, f func(*reading)) reading { f(&v); return v }
	for _, c := range []struct {
		name     string
		capacity float64
		readings []reading
		want     float64
	}{
		{"capped at the estimate before", 538, []reading{with(late, func(v *reading) { v.lateOut = 3000 }), caughtUp}, 538},
		{"only on a drop", 400, []reading{{consumed: 380, lateOut: 200, lag: 400, headKnown: true, headAge: 1.5}, {consumed: 300, headKnown: true}}, 300},
		{"keeps the first drop", 538, []reading{late, {consumed: 50, lateOut: 300, headKnown: true, headAge: 0.1}, caughtUp}, 395},
		{"keeps a higher reading", 538, []reading{late, {consumed: 450, headKnown: true}}, 450},
		{"head past E/2, within E", 538, []reading{late, {consumed: 200, lag: 100, headKnown: true, headAge: 0.3}}, 200},
		{"head unknown", 538, []reading{late, {consumed: 200, lag: 100}}, 200},
		{"head within E/2", 538, []reading{late, {consumed: 200, lag: 100, headKnown: true, headAge: 0.1}}, 395},
		{"late, nothing queued", 538, []reading{late, {consumed: 150, lateOut: 50, headKnown: true, headAge: 0.1}, caughtUp}, 395},
	} {
		vs := make([]*reading, len(c.readings))
		for i := range c.readings {
			vs[i] = &c.readings[i]
		}
		if got := lateShareSteps(&control{capacity: c.capacity}, vs...); got != c.want {
			t.Errorf("%s: estimate %.0f, want %.0f", c.name, got, c.want)
		}
	}
}

// A rate saved by a late reading (395 msg/s of the whole consumer, the
// estimate lowered to 142) is forgotten once the target is unlimited
// again (judge: not limited, a reading that does not engage): a caught-up
// reading of a later episode measures that episode's consumer, and must
// not give back an old episode's rate.
func TestControllerLateShareBackForgottenUnlimited(t *testing.T) {
	c := newCtl(t, ControllerConfig{Interval: time.Second})
	tc := &control{capacity: 538}
	lateShareSteps(tc, &reading{consumed: 142, lateOut: 253, lag: 400, headKnown: true, headAge: 1.5})
	if tc.lateWork != 395 {
		t.Fatalf("saved %.0f msg/s at the late reading, want 395", tc.lateWork)
	}
	// Unlimited again: a measured reading that keeps up with nothing queued.
	v := &reading{dt: 1, measured: true, keepsUp: true, consumed: 300, produced: 300, engageWait: 0.4, headKnown: true}
	c.judge(tc, v)
	if v.engaged {
		t.Fatalf("the reading between engages (wait %.2f s)", v.wait)
	}
	if got := lateShareSteps(tc, &reading{consumed: 100, headKnown: true}); got != 100 {
		t.Errorf("a caught-up reading after the target was unlimited gave back %.0f msg/s, want its own 100", got)
	}
}
