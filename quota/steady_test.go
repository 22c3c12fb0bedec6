package quota

import (
	"fmt"
	"testing"
	"time"
)

// The closed loop of integration's TestHAFailoverUnderOverload in the
// simulator: three partitions, franz-go's default auto-commit (5 s, the
// position consumed: the test's consumer polls 10 records at a time),
// observed every 250 ms and every second; producers offer 300 msg/s to a
// consumer of 400 that falls to 100 at 6 s and stays there: a steady
// overload, where the right rate is about 100 msg/s for ever.

type steadyFigures struct {
	good, dead float64 // messages consumed in [from, end) within the deadline, and after it
	seconds    float64 // end - from
	stepDowns  int     // step-down decisions in [from, end)
	// overProbe: decisions in [from, end) that admitted more than
	// twice the consumer's capacity.
	overProbe int
}

func (f steadyFigures) goodput() float64 { return f.good / (100 * f.seconds) }
func (f steadyFigures) deadShare() float64 {
	return f.dead / max(f.good+f.dead, 1)
}

func (f steadyFigures) String() string {
	return fmt.Sprintf("goodput %.1f%%, dead work %.1f%%, %d step-downs, %d decisions over twice the capacity",
		100*f.goodput(), 100*f.deadShare(), f.stepDowns, f.overProbe)
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
			f.overProbe++
		}
	}
	return f
}

// TestSimSteadyOverload: once the drop at 6 s has been seen and its
// first backlog drained (from 25 s on), the controller holds a steady
// overload of a consumer that commits every 5 s, over seeds 1-10 (the
// producers' jitter and the commit timer's drift): observed every 250 ms,
// every run at >= 90% goodput (mean >= 95%, dead work <= 5%); observed
// every second, mean goodput >= 80% and dead work <= 20%.
//
// Before the probe cap after an overshoot (see blindStep), the means were
// 92.4% and 73.8% goodput, 7.6% and 25.5% dead work: in some runs a
// consumer held at its setpoint read as caught up at its commit, lag/'s
// estimate clamped at the end offset read lag 0, and the controller
// probed x1.5 a reading for a whole commit interval, then drained (250 ms
// seed 10: 66.9%, 21 decisions over twice the capacity; 1 s seed 8:
// 52.1%). With the cap, 95.6% and 81.4%, but a drain lifted it, and the
// next commit that read caught up started the same probes over (250 ms
// seed 2: 66.8%). Where a commit tells a consumer at its setpoint from
// one caught up (datesSetpoint: at 250 ms, not at 1 s), the cap now holds
// through a drain: 250 ms 99.1% (every run >= 96.3%), dead work 0.9%. At
// 1 s it cannot (a commit at the setpoint made in the last 0.2 s before
// the reading reads caught up, and a restored consumer's first commit
// reads the same as one at its setpoint), and holding the cap there cost TestSimDefaultAutoCommit
// and TestSimCommitCadence restores; not asserted per run: 1 s seed 7
// does 53.7%.
func TestSimSteadyOverload(t *testing.T) {
	for _, tc := range []struct {
		interval            time.Duration
		goodput, dead, each float64
	}{
		{250 * time.Millisecond, 0.95, 0.05, 0.90},
		{time.Second, 0.80, 0.20, 0},
	} {
		t.Run(tc.interval.String(), func(t *testing.T) {
			const seeds = 10
			var good, dead float64
			for seed := uint64(1); seed <= seeds; seed++ {
				f := runSteady(t, tc.interval, seed, 25, 50)
				t.Logf("seed %d, from 25 s to 50 s: %v", seed, f)
				good += f.goodput() / seeds
				dead += f.deadShare() / seeds
				if f.goodput() < tc.each {
					t.Errorf("seed %d: goodput %.1f%%, want >= %.0f%%", seed, 100*f.goodput(), 100*tc.each)
				}
			}
			t.Logf("mean goodput %.1f%%, dead work %.1f%%", 100*good, 100*dead)
			if good < tc.goodput || dead > tc.dead {
				t.Errorf("mean goodput %.1f%%, dead work %.1f%%: want >= %.0f%% and <= %.0f%%", 100*good, 100*dead, 100*tc.goodput, 100*tc.dead)
			}
		})
	}
}
