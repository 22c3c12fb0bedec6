package quota

import "testing"

// TestPollBurstGates: pollBurst's conditions one by one, on a consumer
// of 2,000 msg/s (estimate 2,000) whose move reads 3,000 over a two-move
// rate of 2,000, after a step down at 0/s, read every 250 ms with a 250 ms
// commit cadence at the 250 ms setpoint. Each case changes one condition
// (review-standing: 13 of 17 mutants of them survived the other tests).
func TestPollBurstGates(t *testing.T) {
	base := func() (*control, *reading) {
		tc := &control{capacity: 2000, interval: 0.25}
		tc.last.Rule, tc.last.Rate = RuleStepDown, 0
		v := &reading{twoRate: 2000, cadence: 0.25, dt: 0.25, setWait: 0.25, engageWait: 0.2, wasSaturated: true}
		return tc, v
	}
	cases := []struct {
		name string
		mod  func(*control, *reading)
		want float64
		in   float64
	}{
		{"burst after a pause: held at the two moves", func(*control, *reading) {}, 2000, 0},
		{"a rise the two moves show after an admitting reading: read", func(tc *control, v *reading) {
			tc.last.Rule, tc.last.Rate, v.twoRate = RuleSaturated, 1800, 2600
		}, 3500, 3500},
		{"same rise after a pause: held at the two moves", func(_ *control, v *reading) { v.twoRate = 2600 }, 2600, 3500},
		{"a step down that admitted: not a pause", func(tc *control, v *reading) { tc.last.Rate, v.twoRate = 500, 2600 }, 3500, 3500},
		{"after a pause, not below the estimate from before it", func(tc *control, _ *reading) { tc.capBefore = 2400 }, 2400, 0},
		{"nor above the move", func(tc *control, _ *reading) { tc.capBefore = 4000 }, 3000, 0},
		{"a drain at 0/s is a pause", func(tc *control, _ *reading) { tc.last.Rule = RuleDrain }, 2000, 0},
		{"a probe at 0/s is not", func(tc *control, v *reading) { tc.last.Rule, v.twoRate = RuleProbe, 2600 }, 3500, 3500},
		{"cadence 3 intervals (1 s auto-commit at 250 ms... 0.75 s)", func(_ *control, v *reading) { v.cadence = 0.75 }, 3000, 0},
		{"cadence 2 intervals", func(_ *control, v *reading) { v.cadence = 0.5 }, 2000, 0},
		{"not saturated", func(_ *control, v *reading) { v.wasSaturated = false }, 3000, 0},
		{"stalled", func(tc *control, _ *reading) { tc.stalled = true }, 3000, 0},
		{"avoid list changed", func(_ *control, v *reading) { v.avoid = []int32{1} }, 3000, 0},
		{"no two-move rate", func(_ *control, v *reading) { v.twoRate = 0 }, 3000, 0},
		{"within the step threshold", func(_ *control, v *reading) { v.twoRate = 2450 }, 3000, 0},
		{"late partitions' drain out of the two moves", func(_ *control, v *reading) { v.twoRate, v.lateOut = 2200, 600 }, 2000, 0},
		{"setpoint half an interval (1 s, 2 s budget)", func(tc *control, v *reading) {
			tc.interval, v.dt, v.cadence, v.setWait, v.engageWait = 1, 1, 1, 0.5, 0.4
		}, 3000, 0},
	}
	for _, c := range cases {
		tc, v := base()
		c.mod(tc, v)
		in := c.in
		if in == 0 {
			in = 3000
		}
		if got := pollBurst(tc, v, in, DefaultControllerConfig.StepThreshold); got != c.want {
			t.Errorf("%s: pollBurst = %.0f, want %.0f", c.name, got, c.want)
		}
	}
}
