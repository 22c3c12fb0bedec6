package daemon

import (
	"slices"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// runs returns the lengths of fast's runs of fast readings and of the slow
// runs between them (not the slow readings before the first fast one, nor
// those after the last).
func runs(fast []bool) (fastRuns, gaps []int) {
	for i, f := range fast {
		switch {
		case f && (i == 0 || !fast[i-1]):
			fastRuns = append(fastRuns, 1)
		case f:
			fastRuns[len(fastRuns)-1]++
		case len(fastRuns) > 0 && fast[i-1]:
			gaps = append(gaps, 1)
		case len(fastRuns) > 0:
			gaps[len(gaps)-1]++
		}
	}
	if n := len(fast); n > 0 && !fast[n-1] && len(gaps) > 0 {
		gaps = gaps[:len(gaps)-1] // the slow readings after the last trial
	}
	return fastRuns, gaps
}

// commitsEvery commits, at each whole cadence, what was written (at
// 2,000/s) half a second before; cadence gives the cadence at a time (0:
// no commit from then on: the last one stays).
func commitsEvery(cadence func(at time.Duration) time.Duration) func(time.Duration) int64 {
	return func(at time.Duration) int64 {
		var last time.Duration
		for t := time.Duration(0); t <= at; {
			c := cadence(t)
			if c <= 0 {
				break
			}
			last = t
			t += c
		}
		return int64((max(last, 0) - 500*time.Millisecond).Seconds() * 2000)
	}
}

// TestLoopTrialBounds pins the trial's constants with driveTrial's
// consumers (the readings 1 s apart, 250 ms on trial). A 1 s auto-commit
// fails each trial and waits trialWait (4) interval cycles, then twice as
// many after each failure in a row up to trialWaitMax (64): 5, 9, 17,
// 33, 65 and 65 slow readings between its trials (the cycle that fails
// reads slow too). A commit every 500 ms that stops 5 s in (its commits
// missed at the trial's 10th-12th readings) fails the trial at its 12th
// reading: it runs trialCycles readings; one that stops at 5.5 s passes
// at the 12th. A target that passed a trial and then fails one waits
// trialWait again, not the wait its failures before the pass left
// (the pass resets the backoff). A 2 s auto-commit is never tried (its
// cadence over 1.5 intervals). Each part was red against mutants of
// these constants that every other test passed (mutants36, session 36:
// trialCycles 8 or 10, trialWait 2, 3, 5 or 8, trialWaitMax 16, 32 or
// 128, no doubling, no reset at a pass, the wait not counted down, the
// candidate's bound at 2 intervals; docs/results.md).
func TestLoopTrialBounds(t *testing.T) {
	const second = time.Second
	fast, _ := driveTrial(t, commitsEvery(func(time.Duration) time.Duration { return second }), 260)
	fastRuns, gaps := runs(fast)
	if want := []int{5, 9, 17, 33, 65, 65}; !slices.Equal(gaps, want) {
		t.Errorf("1 s auto-commit: slow readings between trials %v, want %v (fast runs %v)", gaps, want, fastRuns)
	}

	stopAt := func(stop time.Duration) func(time.Duration) time.Duration {
		return func(at time.Duration) time.Duration {
			if at > stop {
				return 0
			}
			return 500 * time.Millisecond
		}
	}
	fast, _ = driveTrial(t, commitsEvery(stopAt(5*second)), 40)
	if fastRuns, _ := runs(fast); len(fastRuns) < 2 || fastRuns[0] != trialCycles-1 {
		t.Errorf("500 ms commits stopping at 5 s: fast runs %v, want the first trial failed at its %dth reading", fastRuns, trialCycles)
	}
	fast, tr := driveTrial(t, commitsEvery(stopAt(5500*time.Millisecond)), 40)
	if n := count(fast, 2); n != len(fast)-2 || len(tr.passed) != 1 {
		t.Errorf("500 ms commits stopping at 5.5 s: %d of %d readings after the first two fast (passed %v), want every one (passed at the trial's end)", n, len(fast)-2, tr.passed)
	}

	// A 2 s auto-commit (its cadence over 1.5 intervals) is never tried.
	fast, _ = driveTrial(t, commitsEvery(func(time.Duration) time.Duration { return 2 * second }), 60)
	if n := count(fast, 0); n != 0 {
		t.Errorf("2 s auto-commit: %d readings followed fast, want none (never tried); %v", n, fast)
	}

	// 1 s, 500 ms from 8 s (the second trial passes), 1 s again from
	// 20 s (the target fails a trial once its cadence is relearned).
	fast, _ = driveTrial(t, commitsEvery(func(at time.Duration) time.Duration {
		if at >= 8*second && at < 20*second {
			return 500 * time.Millisecond
		}
		return second
	}), 100)
	fastRuns, gaps = runs(fast)
	if len(gaps) < 3 || !slices.Equal(gaps[:3], []int{5, 5, 9}) {
		t.Errorf("1 s, 500 ms, 1 s commits: slow readings between trials %v, want 5, 5, 9 (the backoff reset by the pass; fast runs %v)", gaps, fastRuns)
	}
}

// TestPassedFineBound: a target that passed a trial stays fine while its
// cadence, learned at the fast readings, is about trialMiss engaged
// intervals or less, with half of one for the readings' jitter: 752 ms
// (a commit every third reading, 250 ms apart, as lagbridge bench
// measured it) and the bound itself, 875 ms, are fine; 900 ms and a 1 s
// auto-commit's 1 s are not; nor is a cadence not learned (0). Red against
// the bound at three intervals (752 ms out), `<` for `<=`, four intervals
// (900 ms in) and no test of 0 (mutants36, session 36).
func TestPassedFineBound(t *testing.T) {
	l := &Loop{Interval: time.Second, EngagedInterval: 250 * time.Millisecond}
	for _, c := range []struct {
		cadence time.Duration
		fine    bool
	}{
		{752 * time.Millisecond, true},
		{875 * time.Millisecond, true},
		{900 * time.Millisecond, false},
		{time.Second, false},
		{0, false},
	} {
		if got := l.passedFine(lag.State{CommitInterval: c.cadence}); got != c.fine {
			t.Errorf("passedFine at a learned cadence of %v: %v, want %v", c.cadence, got, c.fine)
		}
	}
}

// TestTrialGrace: a target that passed a trial by probes (its cadence
// learned at the interval's readings, 1 s here, not yet relearned)
// counts as fine for trialCycles cycles, then is a candidate again: the
// trialCycles+1-th cycle starts a trial. Red when the grace is not
// counted down (fine for good), not used (a trial at once) or one cycle
// short (mutants36, session 36).
func TestTrialGrace(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
		Engaged: func([]lag.Target) bool { return true }}
	st := lag.State{Target: tg, Source: lag.SourceCommits, CommitInterval: time.Second}
	tr := trial{passed: map[lag.Target]int{tg: trialCycles}}
	n := 0
	for ; tr.on == nil && n < 3*trialCycles; n++ {
		if fine, _ := l.engaged([]lag.State{st}, &tr); !fine {
			t.Fatalf("cycle %d after the pass: not fine (trial %+v)", n+1, tr)
		}
	}
	if n != trialCycles+1 {
		t.Errorf("a trial started at cycle %d after the pass (tried at most %d), want %d", n, 3*trialCycles, trialCycles+1)
	}
}

// TestTrialIdleGoesOn: a target on trial with nothing to commit (no
// committed lag) goes on however many readings its commits do not move;
// with work to commit it fails at the trialMiss-th. Red when idle is not
// read (the idle target fails at its third reading; mutants36, session
// 36).
func TestTrialIdleGoesOn(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	for _, c := range []struct {
		lag  int64
		goes int // readings that go on
	}{{0, 2 * trialCycles}, {100, trialMiss - 1}} {
		st := lag.State{Target: tg, Source: lag.SourceCommits, Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{Committed: 1000}, CommittedLag: c.lag}}}
		var tr trial
		tr.start([]lag.Target{tg}, []lag.State{st})
		n := 0
		for n < 2*trialCycles && tr.step(st) {
			n++
		}
		if n != c.goes {
			t.Errorf("committed lag %d, commits still: %d readings went on, want %d", c.lag, n, c.goes)
		}
	}
}

// TestTrialEndByProbes: a trial by probes (no fine target keeps the
// cycles fast) whose target's commits move at every reading passes at
// its trialCycles-th reading although the cadence lag/ learned is still
// the interval's (1 s, over passedFine's bound): the target counts as
// fine for trialCycles cycles, and no trial follows at once. Red when
// the end asks passedFine of a trial by probes too (it fails and waits)
// and when it passes with no grace (a trial again at the next cycle;
// mutants36, session 36).
func TestTrialEndByProbes(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	l := &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
		Engaged: func([]lag.Target) bool { return true }}
	at := func(pos int64) []lag.State {
		return []lag.State{{Target: tg, Source: lag.SourceCommits, CommitInterval: time.Second,
			Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{Committed: pos}, CommittedLag: 100}}}}
	}
	var tr trial
	if fine, _ := l.engaged(at(1000), &tr); !fine || tr.on == nil || !tr.probes {
		t.Fatalf("no trial by probes started: fine %v, trial %+v", fine, tr)
	}
	for i := 1; i <= trialCycles; i++ {
		l.engaged(at(int64(1000+50*i)), &tr)
	}
	if tr.on != nil || tr.wait != 0 || tr.passed[tg] != trialCycles {
		t.Fatalf("after %d readings that moved: trial %+v, want passed, fine for %d cycles", trialCycles, tr, trialCycles)
	}
	if fine, _ := l.engaged(at(1000+50*(trialCycles+1)), &tr); !fine || tr.on != nil {
		t.Errorf("the cycle after the pass: fine %v, trial %+v; want fine by its grace, no trial", fine, tr)
	}
}
