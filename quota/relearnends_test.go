package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestRelearnTrialDue: a relearn trial is told by one of the two readings
// after it (relearnStanding); one whose verdict is not told by then (no
// commit measured since) is dropped, and a head read later is not learned
// as the standing wait. Before, the pending trial waited for whichever
// measured reading came next, however late: here, 10 s on, a head of
// 0.8 s held since the trial and a consumer that consumed what was
// produced relearned the standing wait from a reading the probe had no
// part in.
func TestRelearnTrialDue(t *testing.T) {
	at := leaseT0.Add(30 * time.Second)
	for _, tc := range []struct {
		name  string
		after time.Duration
		dt    float64 // the interval the telling reading came after
		learn bool
	}{
		// The reading after the trial tells: the head held, the probe
		// consumed, so that head is the standing wait.
		{"the next reading", time.Second, 1, true},
		// Ten readings later (none measured between): dropped.
		{"10 s later", 10 * time.Second, 1, false},
		// The next reading, after 10 s of failed observations: its dt
		// is the whole gap, and it is not the probe's verdict either.
		{"10 s later after a gap", 10 * time.Second, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trial := &reading{at: at, dt: 1, cadence: 1}
			ctl := &control{limited: true, interval: 1, floor: 0.1, floorSeen: floorLearn, staleHead: 0.8}
			ctl.staleBy = staleDue(ctl, trial)
			ctl.interval = 1 + 0.25*(tc.dt-1) // smoothed as measure does
			v := &reading{at: at.Add(tc.after), dt: tc.dt, budget: 2, engageWait: 0.4, cadence: 1, headKnown: true, headAge: 0.8,
				lag: 600, produced: 800, consumed: 800}
			relearnStanding(ctl, v, 0.5)
			if learned := ctl.floor >= 0.8; learned != tc.learn {
				t.Errorf("standing wait %.2fs after a verdict %s after the trial: learned %v, want %v", ctl.floor, tc.after, learned, tc.learn)
			}
			if ctl.staleHead != 0 {
				t.Errorf("trial still pending (head %.2fs) after its reading", ctl.staleHead)
			}
		})
	}
}

// TestRelearnCappedNotTold: a relearn reading whose probe a cap held at
// the rate in force (blindStep's cap, here) let nothing more through: it
// is a probe that kept its rate, not a relearn trial, and the trial is
// dropped so that the next qualifying reading tries. Before, it was told
// as relearn and the next reading judged a probe that never happened.
func TestRelearnCappedNotTold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		capped bool
		want   Rule
	}{
		{"probe raised", false, RuleRelearn},
		{"probe capped at the rate in force", true, RuleProbe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			ctl := &control{limited: true, rate: 400, capCap: 400}
			v := &reading{relearn: true, trial: true, capped: tc.capped, measured: true, produced: 400, law: 380, probe: 0.5, dt: 1}
			st := &lag.State{Source: lag.SourceCommits}
			rule, reason := c.caughtUp(ctl, st, v, 400)
			if rule != tc.want {
				t.Errorf("rule %s (%s) at %.0f/s, want %s", rule, reason, ctl.rate, tc.want)
			}
		})
	}
}
