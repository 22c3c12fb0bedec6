package quota

import (
	"fmt"
	"math"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// signal completes d from the rate in force: hard age, the signal and its
// retry-after, the partitions to avoid, the rule and the reason.
func (c *Controller) signal(tc *control, d *Decision, st *lag.State, p *Policy, v *reading, rule Rule, reason string) {
	proc := p.ProcessingTime.Seconds()
	avoid, fewBad := v.avoid, v.fewBad
	// Hard age: stop when a new message would be dead on arrival or the
	// head is past it (unless only a few partitions are); once stopped,
	// stay stopped until both the head is under the hard age and a new
	// message's wait is back within the budget (hysteresis: the head age
	// lags the wait, so without it the signal would flap stop, slow-down,
	// stop while the backlog drains).
	headOver := v.headAge > p.HardAge.Seconds() && !fewBad
	hardStop := p.HardAge > 0 && ((!math.IsInf(v.wait, 1) && v.wait+proc > p.HardAge.Seconds()) || headOver ||
		(tc.hardStopped && v.wait > v.budget))
	tc.hardStopped = hardStop
	stopped := st.Status == lag.StatusStopped

	d.Capacity, d.CapacityKnown = v.capacity, v.engaged && (v.measured || tc.saturated)
	d.TargetWait = time.Duration(v.setWait * float64(time.Second))
	d.Wait = waitDuration(v.wait)
	d.AvoidPartitions, d.PartitionShares = avoid, v.shares
	// others: the rate the partitions not avoided get (see withShares).
	others := d.Rate
	if tc.limited {
		others = max(tc.rate, p.MinRate)
		d.Rate = max(withShares(tc.rate, v.shares), p.MinRate)
	}
	switch {
	case stopped || hardStop:
		d.Signal = SignalStop
		d.Rate = p.MinRate
		if hardStop && !stopped {
			// Say what passed the hard age: the head, or the wait a new
			// message would have (the head may be well under it), or
			// neither any more (held until the wait is within budget).
			rule = RuleHardAge
			head := st.HeadAge.Round(time.Millisecond)
			switch {
			case headOver:
				reason = fmt.Sprintf("head age %s past the hard age %s (a new message would wait %s + processing): %s", head, p.HardAge, secs(v.wait), reason)
			case !math.IsInf(v.wait, 1) && v.wait+proc > p.HardAge.Seconds():
				reason = fmt.Sprintf("a new message would wait %s + processing, past the hard age %s (head age %s): %s", secs(v.wait), p.HardAge, head, reason)
			default:
				reason = fmt.Sprintf("stopped for the hard age %s until a new message's wait (%s) is within the budget %s (head age %s): %s", p.HardAge, secs(v.wait), secs(v.budget), head, reason)
			}
		}
	case tc.limited && (v.wait > v.setWait || v.binding || others < v.capacity):
		d.Signal = SignalSlowDown
		d.RetryAfter = retryAfter(v.backlog, v.setBacklog, v.capacity, others, v.dt, c.cfg.MaxRetryAfter)
	case len(avoid) > 0:
		d.Signal = SignalAvoidPartitions
		if !tc.limited {
			rule = RuleAvoidPartitions
		}
	}
	if len(avoid) > 0 {
		reason += fmt.Sprintf("; partitions %v late (head older than %s or wait over budget; their lag of %.0f left out of the wait, producers write around them)", avoid, p.MaxAge, v.lateLag)
		// The rates the rules name are the other partitions' (the law's);
		// with shares the decision grants more (withShares): say so, or
		// a reason reads "probing from 2890/s" on a rate of 3083/s.
		if d.Signal != SignalStop && tc.limited && math.RoundToEven(d.Rate) != math.RoundToEven(others) {
			reason += fmt.Sprintf("; %.0f/s for the other partitions, %.0f/s in all with the late ones' shares", others, d.Rate)
		}
	}
	d.Rule, d.Reason = rule, reason
	d.Then = plan(d, v, p)
}

// plan is what follows d, a decision made for a bounded time (see
// [Plan]): after a pause (a step down, a drain; see planAfter), the rate
// the law is projected to give; after a probe that raised the rate above
// the capacity the controller works with, that capacity, two intervals on
// (the probe is answered by the next decision, due one interval on; a
// probe that keeps a rate plans nothing, so that a rate kept keeps its
// lease version). nil for any other decision, a stop, or when the plan
// would not lower (a probe) or raise (a pause) the rate.
func plan(d *Decision, v *reading, p *Policy) *Plan {
	if d.Signal == SignalStop || math.IsInf(d.Rate, 1) {
		return nil
	}
	var r, after float64
	switch d.Rule {
	case RuleStepDown, RuleDrain:
		r, after = planAfter(v)
	case RuleProbe, RuleRelearn, RuleProbeRestored:
		if v.raised {
			r, after = v.capacity, 2*v.dt
		}
	}
	if !(r > 0) || math.IsInf(r, 1) || !(after > 0) {
		return nil
	}
	rate := max(withShares(r, v.shares), p.MinRate)
	probe := d.Rule == RuleProbe || d.Rule == RuleRelearn || d.Rule == RuleProbeRestored
	if probe && rate >= d.Rate || !probe && rate <= d.Rate {
		return nil
	}
	return &Plan{At: d.At.Add(time.Duration(after * float64(time.Second))), Rate: rate}
}

// planAfter is what follows a pause (a step down or a drain: the law at
// 0): the rate, msg/s, and in how many seconds it holds. A step down
// pauses for one interval and decides on the next, clean measurement; a
// drain admits nothing until the wait is back within the budget, and the
// law then ramps up to the capacity as the backlog falls to the setpoint.
// Both are projected at the capacity the decision worked with, but no
// more than the consumer showed over this interval (which, on a step
// down, still overstates the new capacity): the backlog then drains at
// that rate, and the law at the projected backlog is the rate. A step
// down's rate follows one interval on; a drain's once the projected
// backlog is back at the setpoint (the law's rate there is the capacity).
// Each comes one more interval later than that: the next decision is due
// by then and, pushed on change, reaches the producers before (a
// follower's replication adds tens of milliseconds), so a plan takes
// effect only when no newer decision arrived. 0: nothing to plan (no
// capacity measured, or the law still at 0 after the pause).
//
// A pause kept because nothing was committed since (stillAfterPause)
// plans nothing: its capacity is the one from before the drop, and a plan
// on it re-opened producers at ~1,800/s for a hung member, to take effect
// at a daemon restart or a lost push (review-keptpause, session 25).
func planAfter(v *reading) (float64, float64) {
	if v.stillHead {
		return 0, 0 // nothing measured since the pause: no capacity to plan on
	}
	c := v.capacity
	if v.consumed > 0 {
		c = min(c, v.consumed)
	}
	if !(c > 0) || math.IsInf(c, 1) || v.dt <= 0 {
		return 0, 0
	}
	hold := v.dt
	if !v.stepDown {
		hold = max((v.backlog-v.setWait*c)/c, v.dt)
	}
	backlog := max(v.backlog-c*hold, 0)
	rate := min(max(c+(v.setWait*c-backlog)/lawTau(v), 0), c)
	return rate, hold + v.dt
}

// withShares is the topic's rate that leaves rate to the partitions
// producers do not avoid: rate, msg/s, is what the law sets for them (their
// capacity, see leaveOutLate), and the rate in force binds every record,
// the keyless records drawn for an avoided partition's share (and the
// keyed records let through for it) too. Set to rate, the others got rate
// less those shares, below their capacity whenever the law is (filling up
// to the setpoint), and the next observation measured that as their
// capacity: a topic limited while partition 0 was fed 6% fell from 298/s
// to 218/s over 10 s (lagbridge bench --hot-partition at 250 ms on kfake).
func withShares(rate float64, shares []PartitionShare) float64 {
	return rate / (1 - min(sumShares(shares), 0.5))
}

// sumShares is the sum of the shares, at least 0.
func sumShares(shares []PartitionShare) float64 {
	var s float64
	for _, ps := range shares {
		s += max(ps.Share, 0)
	}
	return s
}

// retryAfter is the time the backlog above the setpoint takes to drain at
// the net rate capacity - rate, at least one interval, at most max.
func retryAfter(backlog, setBacklog, capacity, rate, dt float64, maxWait time.Duration) time.Duration {
	s := dt
	switch {
	case backlog > setBacklog && capacity > rate:
		s = max((backlog-setBacklog)/(capacity-rate), dt)
	case backlog > setBacklog:
		return maxWait
	}
	return min(time.Duration(s*float64(time.Second)), maxWait)
}
