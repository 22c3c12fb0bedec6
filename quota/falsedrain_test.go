package quota

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestSimFalseDrainNotLocked: a drain must not lock a topic whose consumer
// then sits idle. A new group that auto-commits every second, read every
// second (its commit timer in phase with the observations, committing
// just after each, as lagbridge bench's kafka/autocommit-1s/sync/1s
// consumer), consumes only 40 msg/s for its first 2.1 s (a slow start),
// then 2,000 msg/s, against 800 msg/s offered. Its backlog of the slow
// start is drained (the head passed the deadline); once it is consumed,
// every reading shows the second of uncommitted work its commit cadence
// leaves (lag 768, head 0.96 s) and the consumer consuming what it is
// allowed. Before, that read as a queue at every reading (the target,
// limited from its first readings, had not learned its standing wait)
// and the law cut the rate below what the consumer showed each time:
// 1,500 msg/s at t=5 fell to 104 msg/s at t=45, 46.8% of the offer
// admitted, the consumer idle. Now a probe is let through after three
// such readings, the head stays where it was, and that head is learned as
// the standing wait (Controller.trialUnderCut): the offer is admitted from
// t=11 on, the target released at t=16.
func TestSimFalseDrainNotLocked(t *testing.T) {
	wantSlowStartAdmitted(t, 1.05, 2.1)
}

// wantSlowStartAdmitted runs a new group that auto-commits every second,
// read every second (its first commit at firstCommit s), that consumes
// 40 msg/s until slowUntil s, then 2,000 msg/s, against 800 msg/s
// offered, and wants it drained at least once and 99% of the offer
// admitted from t=12 on.
func wantSlowStartAdmitted(t *testing.T, firstCommit, slowUntil float64) {
	t.Helper()
	ps := producersOffering(3, 800)
	res := runSim(t, simConfig{
		interval:      time.Second,
		commitEvery:   time.Second,
		firstCommit:   firstCommit,
		steadyCommits: true,
		learnCadence:  true,
		partitions:    6,
		duration:      45 * time.Second,
		capacity: func(t float64) float64 {
			if t < slowUntil {
				return 40
			}
			return highCap
		},
		policy:    drainPolicy(),
		producers: ps,
		seed:      12,
		window:    [2]float64{12, 45},
	})
	drained := false
	for _, s := range res.steps {
		drained = drained || s.dec.Rule == RuleDrain
	}
	if !drained {
		t.Fatal("no drain: the case tests nothing")
	}
	var off, adm float64
	for _, p := range ps {
		off += p.winOffered
		adm += p.winAdmitted
	}
	t.Logf("admitted %.1f%% of the offer from t=12 on", 100*adm/off)
	if adm < 0.99*off {
		for _, s := range res.steps {
			if s.t <= 20 {
				t.Logf("t=%.0f: lag %d, head %.2fs, consumed %.0f/s: %s at %.0f/s (%s)", s.t, s.dec.Lag, s.dec.HeadAge.Seconds(), s.consumeInst, s.dec.Rule, s.dec.Rate, s.dec.Reason)
			}
		}
		t.Errorf("admitted %.1f%% of the offer from t=12 on, want >= 99%%: the consumer has 2,000 msg/s for 800 offered", 100*adm/off)
	}
}

// TestControllerIdleAtSightFirstDrain replays the readings of the
// lagbridge bench run (kafka/autocommit-1s/sync/1s at 2x, kfake, main's
// controller at 0976c06 with 860afd1) that drained at its first fresh
// reading and stayed limited at 27-98 msg/s for the whole run, its
// consumer idle with 2,000 msg/s of capacity: {lag, consumed msg/s,
// produced msg/s, head s} at each decision, as the run's CSV recorded
// them (consumed: produced less the lag's growth; the first, the rate its
// decision read). The reading before (rates not known yet) had no lag;
// at the first fresh one a partition had not committed yet (first-seen),
// so noQueueAtCommit did not apply: 41 msg/s of 730, lag 760, head 1.0 s,
// read as a wait of 18.5 s, drained. idleAtSight (71da5eb) takes it for
// what it is, every record written since a reading with no lag: unlimited
// throughout. (Without the reading before, the replay drains and locks as
// the run did: the probes after the drain step from 0, the uncommitted
// second reads as a queue, and the step-downs on lumpy commits pause
// admission every fourth reading.)
func TestControllerIdleAtSightFirstDrain(t *testing.T) {
	p := Policy{Name: "p", MaxAge: 2 * time.Second}
	c := newCtl(t, ControllerConfig{})
	s0 := st(0, 0, 0, 0)
	s0.RatesKnown, s0.Source = false, lag.SourceFirstSight
	c.Step(s0, p, leaseT0)
	for k, r := range [][4]float64{
		{760, 41, 730, 1.002}, {0, 760, 0, 0}, {0, 0, 0, 0}, {0, 10, 10, 0}, {48, 1, 49, 0.953}, {26, 52, 30, 0.945},
		{40, 25, 39, 0.944}, {0, 50, 10, 0}, {49, 0, 49, 0.955}, {26, 51, 28, 0.956}, {42, 24, 40, 0.960}, {0, 52, 10, 0},
	} {
		s := st(float64(k+1), int64(r[0]), r[1], r[2])
		s.Source, s.HeadAge, s.HeadAgeKnown = lag.SourceCommits, time.Duration(r[3]*float64(time.Second)), true
		if k == 0 {
			s.Source = lag.SourceFirstSight
		}
		if k >= 2 {
			s.CommitInterval = time.Second
		}
		if d := c.Step(s, p, leaseT0.Add(time.Duration(k+1)*time.Second)); !d.IsUnlimited() {
			t.Errorf("reading %d (lag %.0f, %.0f msg/s consumed of %.0f, head %.3fs): %s at %.0f/s (%s), want unlimited", k, r[0], r[1], r[2], r[3], d.Rule, d.Rate, d.Reason)
		}
	}
}
