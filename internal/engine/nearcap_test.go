package engine

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
	"github.com/lagbridge/lagbridge/quota"
)

// TestNearCapacity: NearCapacity says whether an unlimited target is
// produced to near its capacity estimate, the highest rate it was seen to
// consume. A consumer offered 1,000 msg/s, never saturated, is near it
// (its estimate is what it consumed: a lower bound); offered 400 after
// that it is far below (the estimate holds at 1,000) and the loop keeps
// the interval; offered 1,000 again it is near once more. Not for a
// limited target (Engaged says yes for it), a held decision, an abandoned
// target, one whose predicted wait is half the engage threshold at the
// fast interval or more (a standing queue the faster readings would read
// as saturated) or unbounded, another cluster or no target. Red without
// the capacity comparison (near at 400), without the rule or the held
// check, without the wait's (near at half the engage threshold), and with
// a share of 0.3.
func TestNearCapacity(t *testing.T) {
	all := []lag.Target{target}
	const fast = 250 * time.Millisecond
	c := &clock{now: t0}
	e, _ := newEngine(t, c, twoProducers)
	w := &world{tr: lag.NewTracker(nil), c: c, e: e, produce: 1000, consume: 2000}
	w.cycles(4)
	if !e.NearCapacity("c1", all, fast) || e.NearCapacity("c2", all, fast) || e.NearCapacity("c1", nil, fast) {
		t.Fatalf("offered 1,000 steadily: near c1 %v (want true), c2 %v, no target %v (want false): %+v",
			e.NearCapacity("c1", all, fast), e.NearCapacity("c2", all, fast), e.NearCapacity("c1", nil, fast), e.Decisions())
	}
	w.produce = 400
	w.cycles(8)
	if e.NearCapacity("c1", all, fast) {
		t.Errorf("offered 400 after 1,000: near its capacity: %+v", e.Decisions())
	}
	w.produce = 1000
	w.cycles(4)
	if !e.NearCapacity("c1", all, fast) {
		t.Errorf("offered 1,000 again: not near its capacity: %+v", e.Decisions())
	}
	p, _ := e.policies.Match(target)
	engage := e.ctl.EngageWait(&p, fast)
	// nearBy reports NearCapacity with c1's decision edited (then put
	// back), and the decision it read.
	nearBy := func(edit func(*quota.Decision)) (bool, quota.Decision) {
		e.mu.Lock()
		d := e.decisions["c1"][target]
		kept := d
		edit(&d)
		e.decisions["c1"][target] = d
		e.mu.Unlock()
		near := e.NearCapacity("c1", all, fast)
		e.mu.Lock()
		e.decisions["c1"][target] = kept
		e.mu.Unlock()
		return near, d
	}
	for _, edit := range []func(*quota.Decision){
		func(d *quota.Decision) { d.Held = true },
		func(d *quota.Decision) { d.Rule = quota.RuleAbandoned },
		func(d *quota.Decision) { d.Wait = engage / 2 },
		func(d *quota.Decision) { d.Wait = -1 },
		func(d *quota.Decision) { d.Signal = quota.SignalSlowDown },
		func(d *quota.Decision) { d.Capacity, d.ProduceRate = 0, 0 },
		func(d *quota.Decision) { d.ProduceRate = 0.85 * d.Capacity },
	} {
		if near, d := nearBy(edit); near {
			t.Errorf("near its capacity by %+v", d)
		}
	}
	// Near at a wait a little under half the engage threshold, and
	// produced to exactly nearCapacity of the estimate (red with `<=`
	// for `<`, mutants36).
	for _, edit := range []func(*quota.Decision){
		func(d *quota.Decision) { d.Wait = engage/2 - time.Millisecond },
		func(d *quota.Decision) { d.ProduceRate = nearCapacity * d.Capacity },
	} {
		if near, d := nearBy(edit); !near {
			t.Errorf("not near its capacity by %+v", d)
		}
	}
	w.consume = 400
	w.cycles(4)
	if d := e.Decisions(); len(d) != 1 || d[0].IsUnlimited() {
		t.Fatalf("not limited after the drop: %+v", d)
	}
	if e.NearCapacity("c1", all, fast) {
		t.Errorf("limited: near its capacity (Engaged's): %+v", e.Decisions())
	}
}
