package quota

import (
	"fmt"
	"testing"
	"time"
)

// The bench's default row (kafka/autocommit-5s/sync/1s) in the simulator:
// franz-go's default auto-commit (every 5 s) over six partitions, observed
// every second with the cadence left to the Tracker, through the bench's
// phases (2,000 msg/s for 10 s, 400 for 20 s, 2,000 for 15 s; a 2 s
// deadline), lagbridge and naive producers (that ignore their leases) side
// by side in the same world.

const (
	benchDrop    = 10.0
	benchRestore = 30.0
	benchEnd     = 45.0
)

// autoCommitFigures are one run's figures, as the bench counts them.
type autoCommitFigures struct {
	good, dead float64 // messages consumed within the deadline and after it
	// before and after: the share of the offer admitted before the drop
	// and from the restore plus one commit interval and one observation
	// interval on (the bench's "after" phase).
	before, after float64
	// idleRefused: seconds (ticks) of the after phase in which producers
	// were refused while the consumer had capacity to spare.
	idleRefused float64
}

func (f autoCommitFigures) deadShare() float64 { return f.dead / max(f.good+f.dead, 1) }

func (f autoCommitFigures) String() string {
	return fmt.Sprintf("good %.0f, dead work %.1f%%, admitted %.1f%% before the drop and %.1f%% after the restore, refused while idle %.2fs",
		f.good, 100*f.deadShare(), 100*f.before, 100*f.after, f.idleRefused)
}

func runAutoCommit(tb testing.TB, interval, commit time.Duration, commitAt, offered float64, open bool) autoCommitFigures {
	tb.Helper()
	res := runSim(tb, simConfig{
		interval:     interval,
		commitEvery:  commit,
		commitAt:     commitAt,
		partitions:   6,
		learnCadence: true,
		duration:     time.Duration(benchEnd * float64(time.Second)),
		capacity:     capacityDropped(benchDrop, benchRestore),
		policy:       drainPolicy(),
		producers:    producersOffering(3, offered),
		seed:         12,
		open:         open,
	})
	after := benchRestore + commit.Seconds() + interval.Seconds()
	var f autoCommitFigures
	var offB, admB, offA, admA float64
	for i, t := range res.tickT {
		f.good += res.tickGood[i]
		f.dead += res.tickDead[i]
		switch {
		case t <= benchDrop:
			offB += res.tickOffered[i]
			admB += res.tickAdmitd[i]
		case t > after:
			offA += res.tickOffered[i]
			admA += res.tickAdmitd[i]
			if res.tickSpare[i] && res.tickAdmitd[i] < 0.99*res.tickOffered[i] {
				f.idleRefused += res.cfg.tick.Seconds()
			}
		}
	}
	f.before, f.after = admB/offB, admA/offA
	return f
}

// TestSimDefaultAutoCommit: with franz-go's default auto-commit, lagbridge
// is never worse than no lagbridge (goodput >= naive's, dead work <=
// naive's, in the same world), and it does not throttle falsely: producers
// offering less than the consumer can take get >= 99% of their offer
// before the drop and once the restored capacity can be known (a commit
// interval and an observation after the restore), and are never refused
// then while the consumer idles. Before lag/ took a consumer caught up at
// its commit to keep up between commits, and the controller took only
// commits as measures of such a consumer's capacity, the 2x row admitted
// 41.9% of the offer after the restore (refused 9 s while the consumer
// idled) and its goodput was 15,801 against naive's 18,924: the capacity
// estimate fell to the admitted rate while the backlog drained and stayed
// there.
func TestSimDefaultAutoCommit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		commitAt float64 // the consumer's first commit, seconds; 0: 2.14 s
		load     float64
	}{
		// The bench's row: 2x, where the consumer has spare capacity
		// before the drop and after the restore; at two phases of the
		// commit timer against the observations.
		{name: "1s interval 2x", interval: time.Second, load: 2},
		{name: "1s interval 2x, commits mid-interval", interval: time.Second, commitAt: 0.5, load: 2},
		// Higher loads: no spare capacity after the restore at 5x and
		// 10x; only the comparison with naive applies.
		{name: "1s interval 5x", interval: time.Second, load: 5},
		{name: "1s interval 10x", interval: time.Second, load: 10},
		// The same consumer observed every 250 ms.
		{name: "250ms interval 2x", interval: 250 * time.Millisecond, load: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			offered := tc.load * lowCap
			naive := runAutoCommit(t, tc.interval, 5*time.Second, tc.commitAt, offered, true)
			lb := runAutoCommit(t, tc.interval, 5*time.Second, tc.commitAt, offered, false)
			t.Logf("naive:     %v", naive)
			t.Logf("lagbridge: %v", lb)
			if lb.good < naive.good {
				t.Errorf("goodput %.0f, naive's %.0f: want >= naive's", lb.good, naive.good)
			}
			if lb.deadShare() > naive.deadShare() {
				t.Errorf("dead work %.1f%%, naive's %.1f%%: want <= naive's", 100*lb.deadShare(), 100*naive.deadShare())
			}
			if offered >= highCap {
				return
			}
			if lb.before < 0.99 || lb.after < 0.99 {
				t.Errorf("admitted %.1f%% of the offer before the drop, %.1f%% after the restore: want >= 99%% of both", 100*lb.before, 100*lb.after)
			}
			if lb.idleRefused > 0 {
				t.Errorf("refused for %.2fs while the consumer had capacity to spare after the restore, want 0", lb.idleRefused)
			}
		})
	}
}
