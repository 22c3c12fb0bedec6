package daemon

import (
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// TestLoopNearCapacityKafkaTrial: a Kafka target read from commits, no
// policy engaged on it but near its capacity (NearCapacity says yes),
// starts the trial as an engaged one does (session 36, nearkafka). A
// consumer that commits every 50 ms or 500 ms (a commit per poll) passes
// it and keeps the cluster at the engaged interval while it stays near
// (asked again about it once passed, while it counts as fine); a 1 s
// auto-commit fails each trial within trialMiss+1 fast readings and waits
// trialWait interval cycles, then twice that, before the next; a 5 s
// auto-commit is never tried. Without the hook (nearCapacity: false), or
// far below its capacity, none is ever read fast. Red before nearkafka
// (the trial started only for an engaged policy: the 50 / 500 ms
// committers never fast), when a passed target is not asked again (back
// to the interval after engagedHold cycles, then a new trial), and when
// one fine by its cadence relearned at the fast readings is not asked
// (the 50 ms committer, MovesWithin at 250 ms).
func TestLoopNearCapacityKafkaTrial(t *testing.T) {
	never := func([]lag.Target) bool { return false }
	always := func([]lag.Target) bool { return true }
	loop := func(near func([]lag.Target) bool) *Loop {
		return &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
			Engaged: never, NearCapacity: near}
	}
	for _, cadence := range []time.Duration{50 * time.Millisecond, 500 * time.Millisecond} {
		fast, tr := driveTrialLoop(t, loop(always), commitsSteady(cadence), 80)
		if n := count(fast, 30); n != 50 {
			t.Errorf("%v commits, near: %d of the last 50 readings followed fast, want 50 (trial passed, still near); %v", cadence, n, fast)
		}
		if !tr.near[lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}] || tr.on != nil {
			t.Errorf("%v commits, near: trial %+v, want passed and asked about", cadence, tr)
		}
		for name, near := range map[string]func([]lag.Target) bool{"no hook": nil, "far below": never} {
			if fast, _ := driveTrialLoop(t, loop(near), commitsSteady(cadence), 60); count(fast, 0) != 0 {
				t.Errorf("%v commits, %s: %d readings followed fast, want none; %v", cadence, name, count(fast, 0), fast)
			}
		}
	}

	fast, tr := driveTrialLoop(t, loop(always), commitsSteady(time.Second), 120)
	fast1, gaps := runs(fast)
	t.Logf("1 s auto-commit, near: fast runs %v, slow between %v; %v", fast1, gaps, fast)
	checkTrials(t, "1 s auto-commit, near", fast1, 6)
	for i := 1; i < len(gaps)-1; i++ { // the last one ends with the run
		if gaps[i] < 2*gaps[i-1]-1 && gaps[i-1] < trialWaitMax {
			t.Errorf("1 s auto-commit, near: slow runs between trials %v, want each about twice the one before (the backoff)", gaps)
			break
		}
	}
	if tr.backoff < 2*trialWait {
		t.Errorf("1 s auto-commit, near: backoff %d after %d trials, want it grown", tr.backoff, len(fast1))
	}

	if fast, _ := driveTrialLoop(t, loop(always), commitsSteady(5*time.Second), 60); count(fast, 0) != 0 {
		t.Errorf("5 s auto-commit, near: %d readings followed fast, want none (never tried); %v", count(fast, 0), fast)
	}
}

// TestTrialNearSticky: a Kafka target that passed a trial NearCapacity
// alone started stays in passed while its cadence is relearned within
// the engaged interval, and so through the drop counts as fine while it
// is within passedFine (500 ms: the cluster stays fast, no new trial);
// one whose trial a policy started keeps main's rule (it leaves passed
// once fine by its cadence, and at 500 ms is tried again). Red when the
// near-started target leaves passed (guard 5x: back to the interval in
// the slow phase, p99 3.32 s against 0.96 / 1.52 s, session 36).
func TestTrialNearSticky(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	st := func(every time.Duration) []lag.State {
		return []lag.State{{Target: tg, CommitInterval: every,
			Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{End: 2000, Committed: 1000, Lag: 1000}}}}}
	}
	always := func([]lag.Target) bool { return true }
	never := func([]lag.Target) bool { return false }
	for _, byNear := range []bool{true, false} {
		l := &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
			Engaged: never, NearCapacity: always}
		tr := trial{passed: map[lag.Target]int{tg: 0}, near: map[lag.Target]bool{tg: byNear}}
		l.engaged(st(250*time.Millisecond), &tr) // fine by its relearned cadence
		if _, ok := tr.passed[tg]; ok != byNear {
			t.Errorf("trial started by near %v: in passed %v after a reading fine by its cadence, want %v", byNear, ok, byNear)
		}
		l.Engaged, l.NearCapacity = always, never // the drop: limited
		fine, coarse := l.engaged(st(500*time.Millisecond), &tr)
		if newTrial := tr.on != nil; !fine || coarse || newTrial == byNear {
			t.Errorf("trial started by near %v: at 500 ms engaged: fine %v, coarse %v, a new trial %v; want fine, a new trial %v", byNear, fine, coarse, newTrial, !byNear)
		}
	}
}
