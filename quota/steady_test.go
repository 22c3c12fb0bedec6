package quota

import (
	"fmt"
	"testing"
	"time"
)

// The closed loop of integration's TestHAFailoverUnderOverload in the
// simulator: three partitions, franz-go's default auto-commit (5 s, of the
// position consumed: the test's consumer polls 10 records at a time),
// observed every 250 ms or every second; producers offer 300 msg/s to a
// consumer of 400 that falls to 100 at 6 s and stays there: a steady
// overload, where the right rate is about 100 msg/s for ever.

type steadyFigures struct {
	good, dead float64 // messages consumed in (from, end] within the deadline, and after it
	seconds    float64 // end - from
	stepDowns  int     // step-down decisions in (from, end]
	// overTwice: decisions in (from, end] that admitted more than
	// twice the consumer's capacity.
	overTwice int
}

func (f steadyFigures) goodput() float64   { return f.good / (100 * f.seconds) }
func (f steadyFigures) deadShare() float64 { return f.dead / max(f.good+f.dead, 1) }

func (f steadyFigures) String() string {
	return fmt.Sprintf("goodput %.1f%%, dead work %.1f%%, %d step-downs, %d decisions over twice the capacity",
		100*f.goodput(), 100*f.deadShare(), f.stepDowns, f.overTwice)
}

func runSteady(tb testing.TB, interval time.Duration, seed uint64, from, end float64) steadyFigures {
	tb.Helper()
	res := runSim(tb, simConfig{
		interval:     interval,
		commitEvery:  5 * time.Second,
		partitions:   3,
		learnCadence: true,
		duration:     time.Duration(end * float64(time.Second)),
		capacity:     step(6, 400, 100),
		policy:       drainPolicy(),
		producers:    producersOffering(2, 300),
		seed:         seed,
	})
	f := steadyFigures{seconds: end - from}
	for i, t := range res.tickT {
		if t > from && t <= end {
			f.good += res.tickGood[i]
			f.dead += res.tickDead[i]
		}
	}
	for _, s := range res.between(from, end) {
		if s.dec.Rule == RuleStepDown {
			f.stepDowns++
		}
		if s.dec.Rate > 2*100 {
			f.overTwice++
		}
	}
	return f
}

// TestSimSteadyNoStepDown: a consumer of a constant 100 msg/s, read
// through lag/'s estimate between its 5 s commits, never gets a step-down
// once its drop at 6 s is behind it (from 10 s on). Before, seeds 1-3 at
// 250 ms had 3, 3 and 1 of them (integration, LAGBRIDGE_HA_AA=1: every
// second reading at 20-23 s and 41-44.5 s, "capacity fell from 109/s to
// at most 71/s during the interval"): the estimate moves by whole messages
// and stalls at a partition's end offset, and one reading of it that
// consumed less was taken for a fall of the capacity, admitting nothing
// for an interval.
func TestSimSteadyNoStepDown(t *testing.T) {
	for _, interval := range []time.Duration{250 * time.Millisecond, time.Second} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%v seed %d", interval, seed), func(t *testing.T) {
				f := runSteady(t, interval, seed, 10, 50)
				t.Logf("from 10 s to 50 s: %v", f)
				if f.stepDowns > 0 {
					t.Errorf("%d step-downs of a consumer whose capacity is constant", f.stepDowns)
				}
			})
		}
	}
}
