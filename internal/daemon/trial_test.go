package daemon

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lagbridge/lagbridge/lag"
)

// driveTrial runs Loop.engaged and the loop's cadence rule (nextQuiet)
// over a Kafka target read from commits, a policy engaged on it
// throughout, without the loop's timers: the reading after one is
// EngagedInterval (250 ms) later while the cadence is fast, else Interval
// (1 s). committed gives the commit at a time; the partition is written
// at 2,000/s. It returns, for each reading, whether the next came fast,
// and the trial as it was after the last one.
func driveTrial(t *testing.T, committed func(at time.Duration) int64, n int) ([]bool, trial) {
	t.Helper()
	return driveTrialLoop(t, &Loop{Name: "c1", Kind: lag.KindKafka, Interval: time.Second, EngagedInterval: 250 * time.Millisecond,
		Engaged: func([]lag.Target) bool { return true }}, committed, n)
}

// driveTrialLoop is driveTrial with the Loop l (its Engaged and
// NearCapacity hooks).
func driveTrialLoop(t *testing.T, l *Loop, committed func(at time.Duration) int64, n int) ([]bool, trial) {
	t.Helper()
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	tracker := lag.NewTracker(nil)
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var tr trial
	quiet := engagedHold
	var fast []bool
	at := time.Second
	for range n {
		end := int64(at.Seconds() * 2000)
		c := min(committed(at), end)
		now := t0.Add(at)
		tracker.Observe(lag.Sample{Target: tg, At: now, Members: 1, Live: lag.LiveYes, Partitions: []lag.PartitionSample{
			{End: end, Committed: c, Lag: end - c, HeadKnown: true, HeadTime: now.Add(-time.Duration(float64(end-c) / 2000 * float64(time.Second)))}}}, now)
		fine, coarse := l.engaged(tracker.States(now), &tr)
		quiet = nextQuiet(quiet, fine, coarse)
		f := quiet < engagedHold
		fast = append(fast, f)
		if f {
			at += l.EngagedInterval
		} else {
			at += l.Interval
		}
	}
	return fast, tr
}

// count is how many of fast are true from index from on.
func count(fast []bool, from int) int {
	n := 0
	for _, f := range fast[from:] {
		if f {
			n++
		}
	}
	return n
}

// checkTrials checks the fast runs of a target that fails each trial: 1
// to most of them, each over within its first trialMiss+1 fast readings.
func checkTrials(t *testing.T, name string, runs []int, most int) {
	t.Helper()
	if len(runs) == 0 || len(runs) > most {
		t.Errorf("%s: fast runs %v, want 1-%d trials (a wait of 4, 8, 16 ... cycles between)", name, runs, most)
	}
	for _, r := range runs {
		if r > trialMiss+1 {
			t.Errorf("%s: fast runs %v, want each trial over within its first %d fast readings", name, runs, trialMiss+1)
			break
		}
	}
}

// TestLoopEngagedTrial: a Kafka target read from commits, engaged, whose
// commits moved at about every 1 s reading, is read at the engaged
// interval for a trial. A consumer that commits every 50 ms (a commit per
// poll of small polls) passes it as soon as its cadence is learned at
// 250 ms (lag.State.MovesWithin); one that commits every 500 ms (a commit
// per poll of half a second's records) passes at the trial's end, its
// cadence learned at the fast readings; the cluster stays fast for both.
// A 1 s auto-commit fails it at the trialMiss-th fast reading in a row
// its commit did not move and goes back to the interval at once, and
// tries again only after trialWait interval cycles, then twice that. A
// 5 s auto-commit is never tried. Red without the trial (the session-31
// scoping: neither consumer ever fast), when a failed trial does not
// send the cluster back at once (the 1 s auto-commit fast for 8 more
// cycles), without the wait (a trial after every failure), and when a
// passed target is not kept fine after the trial (the 500 ms one).
func TestLoopEngagedTrial(t *testing.T) {
	for _, cadence := range []time.Duration{50 * time.Millisecond, 500 * time.Millisecond} {
		fast, tr := driveTrial(t, commitsSteady(cadence), 60)
		if n := count(fast, 30); n != 30 {
			t.Errorf("%v commits: %d of the last 30 readings followed fast, want 30 (trial passed); %v", cadence, n, fast)
		}
		if tr.on != nil || tr.wait != 0 {
			t.Errorf("%v commits: trial %+v, want passed", cadence, tr)
		}
	}

	fast, _ := driveTrial(t, commitsSteady(time.Second), 60)
	fastRuns, _ := runs(fast)
	t.Logf("1 s auto-commit: fast runs %v; %v", fastRuns, fast)
	checkTrials(t, "1 s auto-commit", fastRuns, 5)

	fast, _ = driveTrial(t, commitsSteady(5*time.Second), 60)
	if n := count(fast, 0); n != 0 {
		t.Errorf("5 s auto-commit: %d readings followed fast, want none (never tried); %v", n, fast)
	}
}

// TestTrialProbes: a trial by probes (no fine target keeps the cycles
// fast) steps on the probes' samples alone: a target whose commits move
// at least every trialMiss probes passes at the trial's end and counts
// as fine for trialCycles cycles (lag/ learned its cadence at the
// interval); one whose commits stop for trialMiss probes fails it at
// once. Red when a probe's samples are not stepped (no failure) and when
// the trial by probes does not pass at its end.
func TestTrialProbes(t *testing.T) {
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	sample := func(committed int64) []lag.Sample {
		return []lag.Sample{{Target: tg, Partitions: []lag.PartitionSample{{End: committed + 100, Committed: committed, Lag: 100}}}}
	}
	for _, c := range []struct {
		name   string
		moves  []bool // at each probe
		passed bool
		ok     int // probes that go on (the rest: failed)
	}{
		{"a move every other probe", []bool{true, false, true, false, false, true, true, false, true, false, true, true}, true, 12},
		{"stopped after 4", []bool{true, true, true, true, false, false, false, true}, false, 6},
	} {
		tr := trial{passed: map[lag.Target]int{}}
		tr.start([]lag.Target{tg}, []lag.State{{Target: tg, Partitions: []lag.PartitionState{{PartitionSample: lag.PartitionSample{Committed: 1000}}}}})
		tr.probes = true
		pos, ok := int64(1000), 0
		for _, m := range c.moves {
			if m {
				pos += 50
			}
			if !tr.probe(sample(pos)) {
				break
			}
			ok++
		}
		if _, passed := tr.passed[tg]; passed != c.passed || ok != c.ok {
			t.Errorf("%s: passed %v after %d probes that went on (trial %+v), want %v after %d", c.name, passed, ok, tr, c.passed, c.ok)
		}
		if c.passed && tr.passed[tg] != trialCycles {
			t.Errorf("%s: counts as fine for %d cycles, want %d", c.name, tr.passed[tg], trialCycles)
		}
	}
}

// stopSource is a Kafka target whose commit moves at each of the first
// moving readings (the writer at 1,000 a reading) and never after.
type stopSource struct {
	mu     sync.Mutex
	reads  int
	moving int
}

func (f *stopSource) Observe(context.Context) ([]lag.Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	end := int64(1000 * f.reads)
	c := int64(1000*min(f.reads, f.moving)) - 500
	tg := lag.Target{Kind: lag.KindKafka, Cluster: "c1", Topic: "t", Group: "g"}
	return []lag.Sample{{Target: tg, At: time.Now(), Members: 1, Live: lag.LiveYes,
		Partitions: []lag.PartitionSample{{End: end, Committed: c, Lag: end - c}}}}, nil
}

// TestLoopTrialProbesNotFed: the trial's probes are read by the trial
// alone. A target whose commits moved at its first 4 readings (100 ms
// apart) and then stop is tried, engaged, at the 25 ms engaged interval,
// fails at its third probe, and is tried again after the waits; OnCycle
// (the controller) sees only the interval's readings, each at least the
// interval less half an engaged interval after the one before, while the
// source is read more often. Red when the probes are fed (readings 25 ms
// apart reach OnCycle).
func TestLoopTrialProbesNotFed(t *testing.T) {
	const interval, fast = 100 * time.Millisecond, 25 * time.Millisecond // runLoop's
	src := &stopSource{moving: 4}
	fed, _ := runLoop(t, src, func([]lag.Target) bool { return true }, 40)
	src.mu.Lock()
	reads := src.reads
	src.mu.Unlock()
	if reads <= len(fed) {
		t.Errorf("%d readings, %d of them fed: want probes besides (a trial at least)", reads, len(fed))
	}
	var late []string
	for i := 1; i < len(fed); i++ {
		if gap := fed[i].Sub(fed[i-1]); gap < interval-fast/2-5*time.Millisecond {
			t.Errorf("fed reading %d came %v after the one before, want at least %v: a probe reached the controller", i, gap, interval-fast/2)
		}
		if gap := fed[i].Sub(fed[i-1]); gap > interval+2*fast {
			late = append(late, fmt.Sprintf("reading %d after %v", i, gap.Round(time.Millisecond)))
		}
	}
	// A failed probe that delays the interval's reading does so at every
	// failed trial (3 of 40 readings, each ~interval+3*fast after the one
	// before); one late gap is the machine's (a 154 ms one was seen beside
	// busy loops), so one is let through.
	if len(late) > 1 {
		t.Errorf("%d fed readings came more than %v after the one before (%v): a failed probe delayed the interval's reading", len(late), interval+2*fast, late)
	}
}

// commitsSteady is commitsEvery at one cadence throughout.
func commitsSteady(cadence time.Duration) func(time.Duration) int64 {
	return commitsEvery(func(time.Duration) time.Duration { return cadence })
}
