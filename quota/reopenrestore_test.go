package quota

import (
	"strings"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestControllerReopenCapLiftsAfterRestore: the simulator's 5 s
// previous-poll auto-commit read every 250 ms at 5x (the world of
// kafka/autocommit-5s/sync/250ms). A drain that read still at 15.75 s
// (kept) holds to 36.5 s, past the restore at 30 s, and the commit that
// re-opens it shows a consumer back at 2,000/s; the capacity estimate
// then is 87/s, left from the drain's start. Capped on it (reopenCap), the
// probe held 131/s for 19 readings, until the next commit. The
// re-opening commit's own span (from the newest commit while held) shows
// more than a step above the base, so the cap lifts on the next reading.
func TestControllerReopenCapLiftsAfterRestore(t *testing.T) {
	iv := 250 * time.Millisecond
	res := runSim(t, simConfig{
		interval: iv, commitEvery: 5 * time.Second, commitAt: 0.02, pollCommits: true,
		partitions: 6, learnCadence: true,
		duration: time.Duration(benchEnd * float64(time.Second)),
		capacity: capacityDropped(benchDrop, benchRestore),
		policy:   drainPolicy(), producers: producersOffering(3, 5*lowCap),
		seed: 1, ctl: ControllerConfig{Interval: iv},
	})
	n := 0
	for _, s := range res.steps {
		if s.t <= benchRestore || !strings.Contains(s.dec.Reason, "re-opened a hold that kept a pause") {
			continue
		}
		if n == 0 {
			t.Errorf("t=%.2fs, consumer back at %.0f/s: %s at %.0f/s (%s)", s.t, s.capacity, s.dec.Rule, s.dec.Rate, s.dec.Reason)
		}
		n++
	}
	if n > 0 {
		t.Errorf("%d decisions after the restore capped by the re-open", n)
	}
}

// TestReopenCapFloorAndStep: a probe capped by reopenCap goes to one probe
// step above the re-open's capacity (390/s: 585/s), and never below the
// rate in force (400/s on a base of 100/s).
func TestReopenCapFloorAndStep(t *testing.T) {
	for _, tc := range []struct {
		name          string
		base, inForce float64
		want          float64
	}{
		{"a step above the base", 390, 446, 585},
		{"the rate in force above the cap", 100, 400, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCtl(t, ControllerConfig{})
			ctl := &control{limited: true, rate: tc.inForce, reopen: reopened{base: tc.base}}
			v := &reading{estimated: true, measured: true, produced: tc.inForce, law: tc.inForce, probe: 0.5, dt: 0.25}
			st := &lag.State{Source: lag.SourceEstimate}
			rule, reason := c.caughtUp(ctl, st, v, tc.inForce)
			if ctl.rate != tc.want {
				t.Errorf("%s (%s) at %.0f/s, want %.0f/s", rule, reason, ctl.rate, tc.want)
			}
		})
	}
}

// TestReopenSpanStep: commits showing 1.2x the base keep the cap, 1.3x
// (over StepThreshold, 0.25) lift it.
func TestReopenSpanStep(t *testing.T) {
	c := newCtl(t, ControllerConfig{Interval: 250 * time.Millisecond})
	t0 := time.Date(2026, 12, 3, 22, 0, 0, 0, time.UTC)
	at := func(d time.Duration, committed int64) *lag.State {
		lc := t0.Add(d)
		return &lag.State{At: lc.Add(100 * time.Millisecond), Partitions: []lag.PartitionState{
			{PartitionSample: lag.PartitionSample{Partition: 0, Committed: committed}, LastCommit: lc}}}
	}
	v := &reading{dt: 0.25, probe: DefaultControllerConfig.Probe} // measure sets probe on every reading
	tc := &control{reopen: reopened{base: 400, at: t0, pos: 1000}}
	c.reopenSpan(tc, at(time.Second, 1480), v)
	if tc.reopen.base != 400 {
		t.Fatalf("480/s over 1 s on a base of 400/s: reopen %+v, want kept", tc.reopen)
	}
	c.reopenSpan(tc, at(2*time.Second, 2000), v)
	if tc.reopen.base != 0 {
		t.Errorf("520/s over 1 s on a base of 400/s: reopen %+v, want lifted", tc.reopen)
	}
}

// TestNoteReopenKeptAndForgotten: kept is carried through a hold (a drain
// after the kept pause that no longer reads still), and the re-open is
// forgotten once the target is unlimited.
func TestNoteReopenKeptAndForgotten(t *testing.T) {
	st := &lag.State{}
	tc := &control{limited: true, reopen: reopened{kept: true}}
	noteReopen(tc, st, &reading{}, true)
	if !tc.reopen.kept {
		t.Errorf("a drain reading after a kept pause (not still): kept lost")
	}
	tc = &control{limited: false, rate: 585, reopen: reopened{base: 390}}
	noteReopen(tc, st, &reading{}, false)
	if tc.reopen.base != 0 {
		t.Errorf("unlimited: reopen %+v, want forgotten", tc.reopen)
	}
}
