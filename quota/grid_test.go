package quota

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The 1 s drifting-commit-timer grid: the bench's row
// kafka/autocommit-1s/sync/1s in the simulator (an auto-commit every second
// on a timer that drifts by up to ±10% per commit, six partitions, read
// every second with the cadence left to the Tracker, through the bench's
// phases 2,000 -> 400 -> 2,000 msg/s), over gridSeeds (the drift) and
// gridPhases (the first commit, seconds after the start: its phase against
// the observations), 40 runs a row, lagbridge and naive producers in the
// same world. Its main figure is the seconds in which the producers were
// refused while the consumer had capacity to spare, from the restore plus
// one commit and one observation interval on (issue 12's judged window),
// summed over the 40 runs: one phase of the timer can lock a run that
// another phase leaves alone, so no single run is the measure.
var (
	gridSeeds  = []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	gridPhases = []float64{0.02, 0.2, 0.43, 0.6, 0.8}
)

// gridRow is one row of the grid, its runs' figures summed.
type gridRow struct {
	load  float64
	polls bool // simConfig.pollCommits: the consumer commits its previous poll
	// idle: seconds refused while the consumer idled in the judged
	// window; over: runs with more than 0.15 s of it; worst: the most
	// one run had.
	idle, worst float64
	over        int
	good, dead  float64
	after       float64 // the share of the offer admitted in the judged window, mean over the runs
	// worse lists the runs in which lagbridge's goodput was below naive's
	// or its dead work above naive's; slowRestored the probe-restored
	// decisions of the slow phase (autoCommitFigures.slowRestored).
	worse, slowRestored []string
}

// gridRuns holds the rows runGrid worked out: the simulations are
// deterministic, and the 2x row with the position consumed is read by
// TestSimOneSecondGrid and TestSimOneSecondAutoCommitPhaseMoved alike.
var gridRuns struct {
	sync.Mutex
	rows map[gridKey]gridRow
}

// gridKey names a row of the grid.
type gridKey struct {
	load  float64
	polls bool
}

// runGrid returns the grid's row at load, with the previous poll
// committed when polls, running its 80 simulations the first time only.
func runGrid(tb testing.TB, load float64, polls bool) gridRow {
	tb.Helper()
	gridRuns.Lock()
	defer gridRuns.Unlock()
	k := gridKey{load, polls}
	if r, ok := gridRuns.rows[k]; ok {
		return r
	}
	r := simulateGrid(tb, load, polls)
	if gridRuns.rows == nil {
		gridRuns.rows = map[gridKey]gridRow{}
	}
	gridRuns.rows[k] = r
	return r
}

// simulateGrid runs the grid's row at load: every seed and first-commit
// phase, lagbridge and naive.
func simulateGrid(tb testing.TB, load float64, polls bool) gridRow {
	tb.Helper()
	r := gridRow{load: load, polls: polls}
	n := 0
	for _, seed := range gridSeeds {
		for _, at := range gridPhases {
			tc := autoCommitCase{interval: time.Second, commitAt: at, seed: seed, load: load, polls: polls}
			naive := runAutoCommit(tb, tc, time.Second, load*lowCap, true)
			lb := runAutoCommit(tb, tc, time.Second, load*lowCap, false)
			if lb.good < naive.good || lb.deadShare() > naive.deadShare() {
				r.worse = append(r.worse, fmt.Sprintf("seed %d, first commit at %.2fs: lagbridge %v; naive %v", seed, at, lb, naive))
			}
			for _, d := range lb.slowRestored {
				r.slowRestored = append(r.slowRestored, fmt.Sprintf("seed %d, first commit at %.2fs: %s", seed, at, d))
			}
			r.idle += lb.idleRefused
			r.worst = max(r.worst, lb.idleRefused)
			if lb.idleRefused > 0.15 {
				r.over++
			}
			r.good += lb.good
			r.dead += lb.dead
			r.after += lb.after
			n++
		}
	}
	r.after /= float64(n)
	return r
}

// gridIdle5x bounds the 5x position-consumed row's seconds refused while
// idle (116.00 s since a relearn trial learns its own head, see
// relearnStanding; 124.90 s before, 132.90 s without probe-restored).
const gridIdle5x = 120.0

// TestSimOneSecondGrid prints the grid with -v (the figures a change to
// the controller is judged by against its parent, in docs/results.md):
//
//	go test ./quota -run TestSimOneSecondGrid -v
//
// and checks that lagbridge is never worse than naive in any of its runs,
// that probe-restored never fires in the slow phase (the capacity has not
// come back there), and bounds the 5x position-consumed row (gridIdle5x).
// (TestSimOneSecondAutoCommitPhaseMoved bounds the 2x row's seconds.)
func TestSimOneSecondGrid(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n1 s auto-commit read every second, the bench's phases, %d seeds x %d first-commit phases:\n\n", len(gridSeeds), len(gridPhases))
	fmt.Fprintf(&b, "| load | commits | refused while idle after restore+C+I | runs over 0.15 s | worst run | admitted after (mean) | goodput | dead work |\n|---|---|---|---|---|---|---|---|\n")
	for _, load := range []float64{2, 5} {
		for _, polls := range []bool{false, true} {
			r := runGrid(t, load, polls)
			for _, w := range r.worse {
				t.Errorf("%.0fx, previous poll %v, %s: want goodput >= naive's, dead work <= naive's", load, polls, w)
			}
			if load == 5 && !polls && r.idle > gridIdle5x {
				t.Errorf("5x, position consumed: refused while idle %.2fs in all, want <= %.0fs", r.idle, gridIdle5x)
			}
			for _, d := range r.slowRestored {
				t.Errorf("%.0fx, previous poll %v, %s: probe-restored in the slow phase (capacity 400/s)", load, polls, d)
			}
			what := "position consumed"
			if polls {
				what = "previous poll"
			}
			fmt.Fprintf(&b, "| %.0fx | %s | %.2f s | %d | %.2f s | %.1f%% | %.0f | %.2f%% |\n",
				r.load, what, r.idle, r.over, r.worst, 100*r.after, r.good, 100*r.dead/max(r.good+r.dead, 1))
		}
	}
	if testing.Verbose() {
		fmt.Print(b.String())
	}
}
