package quota

import (
	"math"
	"testing"
	"time"
)

// TestRestoredProbeGate checks restoredProbe's gate and step reading by
// reading: the step scales with the probe (x3 at 0.5), is capped one probe
// step above the rate kept up with while unlimited when that is known and
// taken once a limited episode when it is not, and is never taken for a
// relearn trial, a consumer that consumed a backlog, or one whose head at
// the commit is past the engage wait.
func TestRestoredProbeGate(t *testing.T) {
	c := newCtl(t, ControllerConfig{})
	// A probe after a probe: kept up over two moves with 1,000 msg/s
	// against a saturated 400 (a step is 500).
	ok := func() (control, reading) {
		return control{satCap: 400, last: Decision{Rule: RuleProbe}},
			reading{binding: true, keepsUp: true, keptTwo: true, consumed: 1000, produced: 1000, prevProduced: 1000,
				probe: 0.5, headAge: 0.1, engageWait: 0.4}
	}
	for _, tc := range []struct {
		name string
		edit func(*control, *reading)
		want float64
	}{
		{"keptRate unknown, first in the episode: x3", func(*control, *reading) {}, 3000},
		{"keptRate unknown, once in the episode", func(tc *control, _ *reading) { tc.restored = true }, 0},
		{"keptRate known: one probe step above it", func(tc *control, _ *reading) { tc.keptRate = 1600 }, 2400},
		{"keptRate known, taken before in the episode", func(tc *control, _ *reading) { tc.keptRate, tc.restored = 1600, true }, 2400},
		{"keptRate below base: one probe step above base", func(tc *control, _ *reading) { tc.keptRate = 500 }, 1500},
		{"a smaller probe: 1+4p", func(_ *control, v *reading) { v.probe = 0.1 }, 1400},
		{"last decision a probe-restored", func(tc *control, _ *reading) { tc.last.Rule = RuleProbeRestored }, 3000},
		{"last decision saturated", func(tc *control, _ *reading) { tc.last.Rule = RuleSaturated }, 0},
		{"relearn trial", func(_ *control, v *reading) { v.relearn, v.trial = true, true }, 0},
		{"trial", func(_ *control, v *reading) { v.trial = true }, 0},
		{"no saturated reading in the episode", func(tc *control, _ *reading) { tc.satCap = 0 }, 0},
		// A drain since the episode's 900: three saturated readings after
		// it read at most 400, the reference now; two are not enough.
		{"three saturated readings since a drain: their highest", func(tc *control, _ *reading) { tc.satCap, tc.satNew, tc.satSeen = 900, 400, 3 }, 3000},
		{"two saturated readings since a drain: the episode's", func(tc *control, _ *reading) { tc.satCap, tc.satNew, tc.satSeen = 900, 400, 2 }, 0},
		{"produce over two moves under a step above satCap", func(tc *control, _ *reading) { tc.satCap = 801 }, 0},
		{"producers not using the rate", func(_ *control, v *reading) { v.binding = false }, 0},
		{"not kept up over two moves", func(_ *control, v *reading) { v.keptTwo = false }, 0},
		{"consumed under what was produced the interval before", func(_ *control, v *reading) { v.prevProduced = 1100 }, 0},
		{"consumed a backlog (1.5x what was produced)", func(_ *control, v *reading) { v.consumed = 1500 }, 0},
		{"head at the commit past the engage wait", func(_ *control, v *reading) { v.headAge = 0.5 }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, v := ok()
			tc.edit(&ct, &v)
			if got := c.restoredProbe(&ct, &v, 1000); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("restoredProbe = %.0f, want %.0f", got, tc.want)
			}
		})
	}
}

// TestControllerAdoptUnlimitedEndsEpisode: a follower that adopts an
// unlimited decision (the leader released the target between two of its
// readings) forgets the episode's saturated capacity, so a later episode
// is not judged against it (restoredProbe).
func TestControllerAdoptUnlimitedEndsEpisode(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	c := newCtl(t, ControllerConfig{})
	c.Step(reported(st(1, 0, 100, 100)), p, leaseT0.Add(time.Second))
	tc := c.targets[ordersK]
	tc.satCap, tc.restored, tc.satNew, tc.satSeen = 300, true, 200, satReadings
	c.Adopt(Decision{Target: ordersK, Rate: 100, Capacity: 100})
	if tc.satCap != 300 || !tc.restored || satShown(tc) != 200 {
		t.Fatalf("adopted a limited decision: satCap %v, restored %v, shown %v, want kept", tc.satCap, tc.restored, satShown(tc))
	}
	c.Adopt(Decision{Target: ordersK, Rate: math.Inf(1)})
	if tc.satCap != 0 || tc.restored || satShown(tc) != 0 {
		t.Errorf("adopted an unlimited decision: satCap %v, restored %v, shown %v, want 0, false, 0", tc.satCap, tc.restored, satShown(tc))
	}
}

// TestControllerJudgedUnlimitedEndsEpisode: a reading judged while the
// target is not limited (a release, or never limited) forgets what the
// episode and its readings since the last drain showed saturated, so a
// later episode is not judged against them (restoredProbe, satShown).
func TestControllerJudgedUnlimitedEndsEpisode(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	c := newCtl(t, ControllerConfig{})
	c.Step(reported(st(1, 0, 100, 100)), p, leaseT0.Add(time.Second))
	tc := c.targets[ordersK]
	tc.limited = false
	tc.satCap, tc.restored, tc.satNew, tc.satSeen = 300, true, 200, satReadings
	c.Step(reported(st(2, 0, 200, 200)), p, leaseT0.Add(2*time.Second))
	if tc.limited || tc.satCap != 0 || tc.restored || tc.satSeen != 0 || satShown(tc) != 0 {
		t.Errorf("judged unlimited: limited %v, satCap %v, restored %v, satSeen %d, shown %v, want false, 0, false, 0, 0",
			tc.limited, tc.satCap, tc.restored, tc.satSeen, satShown(tc))
	}
}
