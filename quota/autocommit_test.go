package quota

import (
	"cmp"
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
	// slowRestored lists the probe-restored decisions made in the slow
	// phase, from the drop plus one commit and one observation interval
	// to the restore: the capacity had not come back (see
	// Controller.restoredProbe).
	slowRestored []string
}

func (f autoCommitFigures) deadShare() float64 { return f.dead / max(f.good+f.dead, 1) }

func (f autoCommitFigures) String() string {
	return fmt.Sprintf("good %.0f, dead work %.1f%%, admitted %.1f%% before the drop and %.1f%% after the restore, refused while idle %.2fs",
		f.good, 100*f.deadShare(), 100*f.before, 100*f.after, f.idleRefused)
}

func runAutoCommit(tb testing.TB, tc autoCommitCase, commit time.Duration, offered float64, open bool) autoCommitFigures {
	tb.Helper()
	res := runSim(tb, simConfig{
		interval:      tc.interval,
		commitEvery:   commit,
		commitAt:      tc.commitAt,
		steadyCommits: tc.steady,
		pollCommits:   tc.polls,
		partitions:    6,
		learnCadence:  true,
		duration:      time.Duration(benchEnd * float64(time.Second)),
		capacity:      capacityDropped(benchDrop, benchRestore),
		policy:        drainPolicy(),
		producers:     producersOffering(3, offered),
		seed:          cmp.Or(tc.seed, 12),
		open:          open,
		sticky:        tc.sticky,
	})
	after := benchRestore + commit.Seconds() + tc.interval.Seconds()
	var f autoCommitFigures
	for _, st := range res.steps {
		if st.dec.Rule == RuleProbeRestored && st.t > benchDrop+commit.Seconds()+tc.interval.Seconds() && st.t <= benchRestore {
			f.slowRestored = append(f.slowRestored, fmt.Sprintf("t=%.2fs %.0f/s (%s)", st.t, st.dec.Rate, st.dec.Reason))
		}
	}
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
	for _, tc := range []autoCommitCase{
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
		// The producers as franz-go's default partitioner sends keyless
		// records (the bench's): each sticks to one partition for a few
		// hundred records, so a partition idle over one commit span gets
		// a burst in the next. Before lag/ let a partition caught up at
		// its commit be consumed at what its consumer took over all the
		// partitions (setPool), and took a partition seen with nothing to
		// consume as caught up, 99.3% of the offer was admitted after the
		// restore at 2x, refused for 0.1 s while the consumer idled.
		{name: "1s interval 2x, sticky partitioner", interval: time.Second, load: 2, sticky: 400},
		{name: "1s interval 5x, sticky partitioner", interval: time.Second, load: 5, sticky: 400},
		// Commits of the previous poll (franz-go's): a poll of a backlog
		// is seconds of work, so a span from one commit to the next can
		// hold one poll or two. (The simulated polls are smaller than the
		// bench's: its spans read about 200-410 msg/s for a consumer of
		// 400 in the slow phase, the bench's 181-360.)
		{name: "1s interval 2x, commits of the previous poll", interval: time.Second, load: 2, polls: true},
		{name: "1s interval 5x, commits of the previous poll", interval: time.Second, load: 5, polls: true},
		{name: "250ms interval 2x, commits of the previous poll", interval: 250 * time.Millisecond, load: 2, polls: true},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
}

// autoCommitCase is one run of the simulator against the bench's phases,
// naive and lagbridge producers side by side.
type autoCommitCase struct {
	name     string
	interval time.Duration
	commit   time.Duration // the consumer's auto-commit interval; 0: 5 s
	commitAt float64       // the consumer's first commit, seconds; 0: 3/7 of commit
	load     float64
	sticky   float64 // simConfig.sticky
	steady   bool    // simConfig.steadyCommits
	polls    bool    // simConfig.pollCommits
	seed     uint64  // simConfig.seed; 0: 12
}

// check runs tc and checks the targets of #12: never worse than naive; at
// loads below the restored capacity, >= 99% of the offer admitted before
// the drop and after the restore, and never refused while the consumer
// idles.
func (tc autoCommitCase) check(t *testing.T) {
	tc.checkWithin(t, 0.99, 0)
}

// checkWithin is check with at least after of the offer admitted after the
// restore, and refused while the consumer idles for at most idle seconds.
func (tc autoCommitCase) checkWithin(t *testing.T, after, idle float64) {
	t.Helper()
	offered := tc.load * lowCap
	commit := cmp.Or(tc.commit, 5*time.Second)
	naive := runAutoCommit(t, tc, commit, offered, true)
	lb := runAutoCommit(t, tc, commit, offered, false)
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
	if lb.before < 0.99 || lb.after < after {
		t.Errorf("admitted %.1f%% of the offer before the drop, %.1f%% after the restore: want >= 99%% and >= %.0f%%", 100*lb.before, 100*lb.after, 100*after)
	}
	if lb.idleRefused > idle+1e-9 { // ticks summed in floating point
		t.Errorf("refused for %.2fs while the consumer had capacity to spare after the restore, want <= %.2fs", lb.idleRefused, idle)
	}
}

// TestSimOneSecondAutoCommit: the kafka/autocommit-1s rows, a consumer
// that auto-commits every second, read every second. Its commits are read
// as they are (it commits about once per observation), and half a commit
// to a whole one of consumed, uncommitted work reads as a standing wait:
// the controller learns it while the target is healthy and assumes up to
// one observation of it before (unlearnedWait). Before, the second
// observation limited the target at the rate it consumed (wait 0.48 s >
// engage 0.4 s), and the rate followed itself: 91.1% of the offer admitted
// before the drop, 20.4% after the restore, goodput 12,749 against naive's
// 20,011 (the commit timer drifting); with the timer in phase with the
// observations, committing just after each (as lagbridge bench's consumer
// did: a head of 1.0 s at every reading), the target was limited from the
// second observation on.
//
// What is left, and why the thresholds: what the consumer did in the
// second after the restore shows in the commit seen one commit and one
// observation later, which is when the bench's "after" phase starts; the
// lease made from it arrives 0.1 s later (the push delay): refused for
// those 0.1 s while the consumer idles (the bench's target is 0). In
// phase, the probe at that reading stepped up from the slow phase's rate
// in force (470/s x1.5 = 705/s of an 800/s offer) and the producers were
// refused one more observation (1.10 s, 98.7% admitted after the
// restore); it now steps up from what the consumer consumed (564/s x1.5,
// see Controller.probeBase: the standing wait of its cadence, a second,
// taken out of the head gates).
func TestSimOneSecondAutoCommit(t *testing.T) {
	for _, tc := range []struct {
		autoCommitCase
		after, idle float64
	}{
		{autoCommitCase{name: "timer drifting", interval: time.Second, commit: time.Second, load: 2}, 0.99, 0.1},
		{autoCommitCase{name: "timer in phase, committing after each observation", interval: time.Second, commit: time.Second, commitAt: 0.02, steady: true, load: 2}, 0.99, 0.1},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.checkWithin(t, tc.after, tc.idle) })
	}
}

// TestSimRestoreProbesFromConsumed: consumers that commit several times
// per observation (commit per poll, or a 100-250 ms auto-commit, read
// every second: their commits are read as they are), through the bench's
// phases at 2x. Once capacity returns, the consumer drains the slow
// phase's standing backlog within the first interval (624 msg/s consumed
// against 404 allowed, commits every 100 ms); the probe stepped up from
// the rate in force (the law gave 780 of an 800 offer), so the producers
// were refused for the next interval while the consumer sat idle: 0.85-1.0
// s after the restore plus one commit and one observation interval (the
// bench's "after" phase), 99.2-99.8% admitted there. Probing from what the
// consumer showed (see Controller.probeBase), they are refused for none of it.
func TestSimRestoreProbesFromConsumed(t *testing.T) {
	for _, tc := range []autoCommitCase{
		{name: "commits every 100 ms", interval: time.Second, commit: 100 * time.Millisecond, load: 2},
		{name: "commits every 100 ms, mid-interval", interval: time.Second, commit: 100 * time.Millisecond, commitAt: 0.55, load: 2},
		{name: "commits every 250 ms", interval: time.Second, commit: 250 * time.Millisecond, load: 2},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
}
