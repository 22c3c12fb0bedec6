package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestSimOneSecondAutoCommitPhaseMoved: a consumer that auto-commits every
// second on a timer that drifts (Java's and franz-go's), read every
// second, through the bench's phases at 2x, over 8 seeds of the drift and
// 5 phases of its first commit. The standing wait its commits leave is
// anything from none to a second, as the timer's phase against the
// observations moves; it is learned before the drop (0.4 s in the first
// case) and the phase moved while the target was limited (0.8-0.9 s after
// the restore). Before relearnStanding (RuleRelearn) the law read the
// difference as its setpoint's queue and held the rate at what the idle
// consumer was allowed: 13 s refused while the consumer idled in each of
// the two cases below (53.6% and 62.3% of the offer admitted after the
// restore), 99.95 s over the 40 runs, 13 of them over 0.15 s. Now 2.10 s
// and 1.10 s (a trial at the restore's first readings, then the probe's
// climb), 49.73 s over the 40 runs (46.63 s since drainedAtCommits re-opens a
// consumer that drained at its old rate, 40.41 s since a trial learns its
// own head, not the telling reading's). What is left: runs whose standing
// wait learned was under E/2 with no skipped commit to show the phase
// moving (seed 2, first commit at 0.02 s: 10.1 s), and probe climbs cut
// back by lumpy commits.
func TestSimOneSecondAutoCommitPhaseMoved(t *testing.T) {
	for _, tc := range []struct {
		autoCommitCase
		after, idle float64
	}{
		{autoCommitCase{name: "seed 2, first commit at 0.6s", interval: time.Second, commit: time.Second, commitAt: 0.6, seed: 2, load: 2}, 0.92, 2.1},
		{autoCommitCase{name: "seed 3, first commit at 0.6s", interval: time.Second, commit: time.Second, commitAt: 0.6, seed: 3, load: 2}, 0.99, 1.1},
		// Commits of the previous poll, a standing wait learned under
		// E/2 (0.1 s) and no commit skipped: before the one trial a
		// limited episode allows such a consumer (staleSpent), 10.1 s
		// refused while idle, 79.7% admitted after the restore.
		{autoCommitCase{name: "seed 2, first commit at 0.02s, previous poll committed", interval: time.Second, commit: time.Second, commitAt: 0.02, seed: 2, load: 2, polls: true}, 0.87, 4.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.checkWithin(t, tc.after, tc.idle)
			res := runSim(t, simConfig{
				interval: time.Second, commitEvery: time.Second, commitAt: tc.commitAt, pollCommits: tc.polls, partitions: 6, learnCadence: true,
				duration: time.Duration(benchEnd * float64(time.Second)), capacity: capacityDropped(benchDrop, benchRestore),
				policy: drainPolicy(), producers: producersOffering(3, tc.load*lowCap), seed: tc.seed,
			})
			var relearn []string
			for _, s := range res.steps {
				if s.dec.Rule == RuleRelearn {
					relearn = append(relearn, fmt.Sprintf("t=%.0f", s.t))
					// A trial is a probe: above the capacity it plans
					// the way back to it, as a probe does (see plan).
					if s.dec.Then == nil || s.dec.Then.Rate >= s.dec.Rate {
						t.Errorf("t=%.0f: relearn trial at %.0f/s plans %v, want a lower rate planned", s.t, s.dec.Rate, s.dec.Then)
					}
				}
			}
			t.Logf("relearn trials at %v", relearn)
			if len(relearn) == 0 {
				t.Errorf("no %s decision", RuleRelearn)
			}
		})
	}
	t.Run("8 seeds x 5 phases", func(t *testing.T) {
		r := runGrid(t, 2, false)
		for _, w := range r.worse {
			t.Errorf("%s: want goodput >= naive's, dead work <= naive's", w)
		}
		t.Logf("refused while the consumer idled after the restore: %.2fs in all, %d runs of %d over 0.15s", r.idle, r.over, len(gridSeeds)*len(gridPhases))
		if r.idle > 44 {
			t.Errorf("refused while idle %.2fs in all, want <= 44s", r.idle)
		}
	})
}

// TestCommitPhaseNotFromShadow: a reading without a commit of a consumer
// that commits about once per observation marks its commit phase as one
// that matters (relearn may try it for floorMemory after), unless the
// reading is in the shadow of the observer's own stall: the machine held
// that commit back, not the consumer's timer.
func TestCommitPhaseNotFromShadow(t *testing.T) {
	at := leaseT0.Add(30 * time.Second)
	st := lag.State{At: at, Lag: 400}
	for _, shadow := range []bool{false, true} {
		tc := &control{}
		v := &reading{shadow: shadow, commits: true, learned: true, cadence: 1, dt: 1}
		commitPhase(tc, &st, v)
		if v.phaseMoved == shadow || tc.skipAt.IsZero() == !shadow {
			t.Errorf("no commit in an observation, shadow %v: phase moved %v (skipAt %v), want %v", shadow, v.phaseMoved, tc.skipAt, !shadow)
		}
	}
}
